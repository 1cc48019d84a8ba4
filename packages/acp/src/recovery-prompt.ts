/**
 * The one bounded recovery prompt sent to a fresh ACP session when native
 * state could not be resumed, projected from the canonical event log.
 *
 * It carries the latest compaction summary, the user/assistant turns after
 * it, completed tool *results* (by tool name) and attachment references, and
 * the current request. Tool *inputs* are never replayed: a recovered agent
 * must not be nudged into repeating a side effect it already performed.
 */
import type { AcpRecoveryReason } from "./watermarks.ts";

export const RECOVERY_WARNING_SOURCE = "acp_semantic_recovery";
export const RECOVERY_WARNING_MESSAGE = "Agent-native session state was unavailable; continued from canonical OpenMA history.";
export const DEFAULT_RECOVERY_BUDGET = 32_000;
export const MIN_RECOVERY_BUDGET = 1_024;
const MIN_REQUEST_SHARE = 256;
const OMITTED = "… earlier history omitted …";
const TRUNCATED = "… [truncated] …";

/** A canonical event as the API returns it (flat fields). */
export interface CanonicalEvent {
  id: string;
  type: string;
  [field: string]: unknown;
}

type Block = { type?: unknown; text?: unknown; source?: unknown; title?: unknown };

function blockText(block: Block): string {
  switch (block.type) {
    case "text":
      return typeof block.text === "string" ? block.text : "";
    case "image":
      return `[image: ${sourceRef(block.source)}]`;
    case "document": {
      const title = typeof block.title === "string" && block.title !== "" ? ` ${block.title}` : "";
      return `[document${title}: ${sourceRef(block.source)}]`;
    }
    default:
      return "";
  }
}

function sourceRef(source: unknown): string {
  if (!source || typeof source !== "object") return "inline";
  const s = source as Record<string, unknown>;
  if (typeof s.file_id === "string") return s.file_id;
  if (typeof s.url === "string") return s.url;
  return "inline";
}

function contentText(content: unknown): string {
  if (typeof content === "string") return content;
  if (!Array.isArray(content)) return "";
  return content
    .map((b) => (b && typeof b === "object" ? blockText(b as Block) : ""))
    .filter((t) => t !== "")
    .join("\n");
}

/** The history lines, oldest first, starting after the latest non-empty compaction summary. */
export function recoveryHistoryLines(events: readonly CanonicalEvent[], currentPrompt: string): string[] {
  let lines: string[] = [];
  const toolNames = new Map<string, string>();
  let lastUserIndex = -1;
  let lastUserText = "";
  for (const e of events) {
    switch (e.type) {
      case "agent.thread_context_compacted": {
        const summary = typeof e.summary === "string" ? e.summary : contentText(e.content);
        if (summary.trim() !== "") {
          lines = [`User: <conversation-summary>\n${summary}\n</conversation-summary>`];
          lastUserIndex = -1;
        }
        break;
      }
      case "user.message": {
        const text = contentText(e.content);
        if (text !== "") {
          lines.push(`User: ${text}`);
          lastUserIndex = lines.length - 1;
          lastUserText = text;
        }
        break;
      }
      case "agent.message": {
        const text = contentText(e.content);
        if (text !== "") lines.push(`Assistant: ${text}`);
        break;
      }
      case "agent.tool_use":
      case "agent.custom_tool_use":
        toolNames.set(e.id, String(e.name ?? "tool"));
        break;
      case "agent.mcp_tool_use":
        toolNames.set(e.id, `${String(e.mcp_server_name ?? "mcp")}/${String(e.name ?? "tool")}`);
        break;
      case "agent.tool_result":
      case "agent.mcp_tool_result":
      case "user.custom_tool_result": {
        const useId = String(e.tool_use_id ?? e.mcp_tool_use_id ?? e.custom_tool_use_id ?? "");
        const name = toolNames.get(useId) ?? "tool";
        const verb = e.is_error === true ? "Failed tool" : "Completed tool";
        lines.push(`${verb} ${name}: ${contentText(e.content) || "(no output)"}`);
        break;
      }
    }
  }
  // The current request is sent separately: do not say it twice.
  if (lastUserIndex >= 0 && lastUserText === currentPrompt) lines.splice(lastUserIndex, 1);
  return lines;
}

function middleTruncate(text: string, max: number): string {
  if (text.length <= max) return text;
  if (max <= TRUNCATED.length) return text.slice(0, max);
  const keep = max - TRUNCATED.length;
  const head = Math.ceil(keep / 2);
  return `${text.slice(0, head)}${TRUNCATED}${text.slice(text.length - (keep - head))}`;
}

export interface RecoveryPromptInput {
  reason: AcpRecoveryReason;
  events: readonly CanonicalEvent[];
  currentPrompt: string;
  /** Upper bound on the prompt's length in characters (default 32 000, at least 1 024). */
  budget?: number;
}

export function buildRecoveryPrompt(input: RecoveryPromptInput): string {
  const budget = Math.max(MIN_RECOVERY_BUDGET, Math.floor(input.budget ?? DEFAULT_RECOVERY_BUDGET));
  const explanation =
    input.reason === "native-state-stale"
      ? "The agent's native session checkpoint is behind (or ahead of) the canonical OpenMA history, so it was not resumed."
      : "The agent's native session state is missing, so it could not be resumed.";
  const head = [
    `<openma-recovery version="1" reason="${input.reason}">`,
    explanation,
    "Continue from the canonical OpenMA history and the current workspace.",
    "Do not repeat completed side effects. Inspect current files before changing them.",
    "Recovered conversation:",
  ].join("\n");
  const tail = "</openma-recovery>";
  const history = recoveryHistoryLines(input.events, input.currentPrompt);
  const frame = `${head}\n\nCurrent request:\n\n${tail}`.length + 2;
  const room = Math.max(0, budget - frame);
  const requestMax = history.length > 0 ? Math.max(MIN_REQUEST_SHARE, Math.floor(room * 0.6)) : room;
  const request = middleTruncate(input.currentPrompt, Math.min(requestMax, room));
  let historyRoom = room - request.length;
  const kept: string[] = [];
  for (let i = history.length - 1; i >= 0; i--) {
    const line = history[i] as string;
    const cost = line.length + 1;
    const markerCost = i > 0 ? OMITTED.length + 1 : 0;
    if (cost + markerCost <= historyRoom) {
      kept.unshift(line);
      historyRoom -= cost;
      continue;
    }
    // Nothing fits yet: keep the newest line, truncated, rather than nothing.
    if (kept.length === 0 && historyRoom > OMITTED.length + 1 + TRUNCATED.length + 16) {
      kept.unshift(middleTruncate(line, historyRoom - OMITTED.length - 2));
    }
    kept.unshift(OMITTED);
    break;
  }
  return [head, kept.join("\n"), "Current request:", request, tail].join("\n");
}
