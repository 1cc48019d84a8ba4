/**
 * ACP `session/update` → Managed Agents events, for one turn.
 *
 * Message and thought chunks are joined into one event per run of chunks;
 * a tool call becomes `agent.tool_use` when it appears and `agent.tool_result`
 * when it reaches `completed` or `failed`; a plan is shown as thinking (the
 * Managed Agents event set has no plan event). `usage_update` is context
 * occupancy (used/size), never billing: it is kept, not published.
 * `PromptResponse.usage` is billing: it closes the turn's model-request span.
 */
import type { PromptResponse, SessionUpdate } from "@agentclientprotocol/sdk/unstable";

export interface EventDraft {
  id: string;
  type: string;
  [field: string]: unknown;
}

export interface ContextOccupancy {
  used: number;
  size: number;
}

type ContentLike = { type: string; text?: string };

function textOf(content: ContentLike | undefined): string {
  return content?.type === "text" && typeof content.text === "string" ? content.text : "";
}

function toolResultText(content: unknown): string {
  if (!Array.isArray(content)) return "";
  const parts: string[] = [];
  for (const c of content as { type?: string; content?: ContentLike; path?: string; terminalId?: string }[]) {
    if (c.type === "content") parts.push(textOf(c.content));
    else if (c.type === "diff") parts.push(`[diff ${c.path ?? ""}]`);
    else if (c.type === "terminal") parts.push(`[terminal ${c.terminalId ?? ""}]`);
  }
  return parts.filter((p) => p !== "").join("\n");
}

export class TurnProjection {
  private readonly out: EventDraft[] = [];
  private pending: { kind: "message" | "thinking"; text: string } | null = null;
  private readonly toolUses = new Map<string, string>();
  private readonly finished = new Set<string>();
  occupancy: ContextOccupancy | null = null;

  constructor(private readonly nextId: () => string) {}

  private flush(): void {
    if (!this.pending) return;
    const { kind, text } = this.pending;
    this.pending = null;
    if (kind === "message") this.out.push({ id: this.nextId(), type: "agent.message", content: [{ type: "text", text }] });
    else this.out.push({ id: this.nextId(), type: "agent.thinking" });
  }

  private chunk(kind: "message" | "thinking", text: string): void {
    if (text === "") return;
    if (this.pending?.kind !== kind) this.flush();
    this.pending ??= { kind, text: "" };
    this.pending.text += text;
  }

  apply(update: SessionUpdate): void {
    switch (update.sessionUpdate) {
      case "agent_message_chunk":
        this.chunk("message", textOf(update.content as ContentLike));
        break;
      case "agent_thought_chunk":
        this.chunk("thinking", textOf(update.content as ContentLike));
        break;
      case "plan":
        this.chunk("thinking", update.entries.map((e) => `[${e.status}] ${e.content}`).join("\n"));
        this.flush();
        break;
      case "tool_call": {
        this.flush();
        const id = this.nextId();
        this.toolUses.set(update.toolCallId, id);
        this.out.push({ id, type: "agent.tool_use", name: update.title || update.kind || "tool", input: update.rawInput ?? {} });
        if (update.status === "completed" || update.status === "failed") this.result(update.toolCallId, update.status, update.content);
        break;
      }
      case "tool_call_update":
        if (update.status === "completed" || update.status === "failed") {
          this.flush();
          this.result(update.toolCallId, update.status, update.content);
        }
        break;
      case "usage_update":
        this.occupancy = { used: update.used, size: update.size };
        break;
      default:
        break;
    }
  }

  private result(toolCallId: string, status: "completed" | "failed", content: unknown): void {
    const useId = this.toolUses.get(toolCallId);
    if (!useId || this.finished.has(toolCallId)) return;
    this.finished.add(toolCallId);
    this.out.push({
      id: this.nextId(),
      type: "agent.tool_result",
      tool_use_id: useId,
      content: [{ type: "text", text: toolResultText(content) || "(no output)" }],
      is_error: status === "failed",
    });
  }

  /** The turn's events so far, in order (chunks still open are closed). */
  take(): EventDraft[] {
    this.flush();
    return this.out.splice(0);
  }
}

/** `span.model_request_end` fields from a PromptResponse; zero usage when the agent reports none. */
export function modelRequestEnd(startId: string, response: PromptResponse | null): Record<string, unknown> {
  const u = response?.usage;
  return {
    model_request_start_id: startId,
    is_error: response === null,
    model_usage: {
      input_tokens: u?.inputTokens ?? 0,
      output_tokens: u?.outputTokens ?? 0,
      cache_read_input_tokens: u?.cachedReadTokens ?? 0,
      cache_creation_input_tokens: u?.cachedWriteTokens ?? 0,
    },
  };
}
