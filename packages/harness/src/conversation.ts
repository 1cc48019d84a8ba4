/**
 * Rebuilds the Messages API conversation from the event log.
 *
 * - `user.message` and `system.message` are user turns (a system message is
 *   wrapped in `<system-message>` tags, the Messages API has no mid-thread
 *   system role); `agent.message` and every kind of tool use are assistant
 *   turns, with the tool use's event id as the `tool_use` id.
 * - Each assistant turn's tool uses are answered at the start of the next
 *   user turn, whatever kind of result event answered them and wherever it
 *   sits in the log; a call the user interrupted gets a synthetic error
 *   result so the conversation stays valid.
 * - `user.define_outcome` is a user turn with the task and its rubric; a
 *   grader verdict that sends the agent back to work is one too.
 * - `agent.thread_message_received` (multi-agent threads) is a user turn
 *   naming the thread it came from; what a thread sent is already in its
 *   own tool use or reply, so `agent.thread_message_sent` is not replayed.
 * - `agent.thinking` carries no content in the API and is not replayed.
 * - `file` image/document sources are inlined as base64 from the files store.
 * - after a compaction (`agent.thread_context_compacted`), the conversation
 *   opens with the summary as a user turn and keeps only the content events
 *   from the compaction's `kept_from_seq` on (compaction.ts).
 */
import type { ContentBlockParam, MessageParam, ToolResultBlockParam } from "@anthropic-ai/sdk/resources/messages";
import type { Storage } from "@openma/storage";
import type { LogState, OutcomeRecord, ResultRecord } from "./log.ts";
import { outcomeTask, rubricText, verdictTurn } from "./outcome.ts";
import { serverKey } from "./tools.ts";

type Block = Record<string, unknown> & { type: string };

const INTERRUPTED_RESULT = "This tool call did not complete: the user interrupted the turn before a result was recorded.";

async function fileSource(storage: Storage, fileId: string): Promise<Block | null> {
  const row = await storage.db.selectFrom("files").select(["blob_key", "mime_type"]).where("id", "=", fileId).executeTakeFirst();
  if (!row) return null;
  const data = await storage.blobs.get(row.blob_key);
  if (!data) return null;
  return { type: "base64", media_type: row.mime_type, data: data.toString("base64") };
}

/** A stored content block as a Messages API block, or null when it has no Messages API form. */
async function blockFor(storage: Storage, block: Block): Promise<Block | null> {
  switch (block.type) {
    case "text":
      return typeof block.text === "string" && block.text !== "" ? { type: "text", text: block.text } : null;
    case "image":
    case "document": {
      const source = block.source as Block | undefined;
      if (source?.type !== "file") return block;
      const inlined = await fileSource(storage, String(source.file_id));
      if (!inlined) return { type: "text", text: `[${block.type} ${String(source.file_id)} is no longer available]` };
      const { source: _s, ...rest } = block;
      return { ...rest, source: inlined };
    }
    case "search_result":
      return block;
    default:
      return null; // redacted blocks
  }
}

async function blocksFor(storage: Storage, content: unknown): Promise<Block[]> {
  const out: Block[] = [];
  if (!Array.isArray(content)) return out;
  for (const raw of content) {
    if (!raw || typeof raw !== "object") continue;
    const block = await blockFor(storage, raw as Block);
    if (block) out.push(block);
  }
  return out;
}

async function resultBlock(storage: Storage, toolUseId: string, result: ResultRecord | undefined): Promise<ToolResultBlockParam> {
  if (!result)
    return { type: "tool_result", tool_use_id: toolUseId, is_error: true, content: [{ type: "text", text: INTERRUPTED_RESULT }] };
  const content = await blocksFor(storage, result.content);
  const block: ToolResultBlockParam = { type: "tool_result", tool_use_id: toolUseId };
  if (content.length) block.content = content as unknown as ToolResultBlockParam["content"];
  if (result.isError) block.is_error = true;
  return block;
}

/** The latest compaction of a session: its summary and where the verbatim part starts. */
export interface LoadedCompaction {
  eventId: string;
  keptFromSeq: number;
  summary: string;
}

/** The user turn that stands for everything a compaction summarized. */
export function summaryTurnText(summary: string): string {
  return `<conversation-summary>\nThe earlier part of this conversation was compacted into this summary:\n\n${summary}\n</conversation-summary>`;
}

/** The session's latest compaction (null when it has none). */
export async function loadCompaction(storage: Storage, sessionId: string, state: LogState): Promise<LoadedCompaction | null> {
  if (!state.compaction) return null;
  const row = await storage.db
    .selectFrom("session_compactions")
    .select(["kept_from_seq", "summary"])
    .where("session_id", "=", sessionId)
    .where("event_id", "=", state.compaction.id)
    .executeTakeFirst();
  // The row is written with its event; without it the log was tampered with, so fail loudly rather than drop history silently.
  if (!row) throw new Error(`compaction ${state.compaction.id} of session ${sessionId} has no summary`);
  return { eventId: state.compaction.id, keptFromSeq: Number(row.kept_from_seq), summary: row.summary };
}

export interface ConversationOptions {
  /** The session's latest compaction, when it has one (`loadCompaction`). */
  compaction?: LoadedCompaction | null;
  /** Only events before this seq (the part a new compaction summarizes). */
  before?: number;
}

interface Turn {
  role: "user" | "assistant";
  content: Block[];
  toolUseIds: string[];
}

/**
 * @param exposed the name the model sees for a recorded server tool use, by
 *   `serverKey(mcp_server_name, name)` (executors may rename tools, e.g. MCP
 *   `<server>__<tool>`); recorded names are used as they are otherwise.
 */
export async function buildConversation(
  storage: Storage,
  state: LogState,
  exposed: ReadonlyMap<string, string> = new Map(),
  options: ConversationOptions = {},
): Promise<MessageParam[]> {
  const turns: Turn[] = [];
  const answer = async (turn: Turn) => {
    if (turn.toolUseIds.length === 0) return;
    const results: Block[] = [];
    for (const id of turn.toolUseIds) results.push((await resultBlock(storage, id, state.results.get(id))) as unknown as Block);
    turns.push({ role: "user", content: results, toolUseIds: [] });
  };
  const add = async (role: Turn["role"], blocks: Block[], toolUseId?: string) => {
    if (blocks.length === 0) return;
    let last = turns.at(-1);
    if (last && last.role !== role && last.role === "assistant") {
      await answer(last);
      last = turns.at(-1);
    }
    if (!last || last.role !== role) {
      last = { role, content: [], toolUseIds: [] };
      turns.push(last);
    }
    last.content.push(...blocks);
    if (toolUseId) last.toolUseIds.push(toolUseId);
  };
  const { compaction, before } = options;
  if (compaction) await add("user", [{ type: "text", text: summaryTurnText(compaction.summary) }]);
  for (const e of state.events) {
    if (before !== undefined && e.seq >= before) break;
    if (compaction && e.seq < compaction.keptFromSeq) continue;
    const b = e.body;
    switch (e.type) {
      case "user.message":
        await add("user", await blocksFor(storage, b.content));
        break;
      case "agent.thread_message_received": {
        const from = `${String(b.from_agent_name ?? "agent")} (thread ${String(b.from_session_thread_id ?? "")})`;
        const blocks = await blocksFor(storage, b.content);
        if (blocks.length)
          await add("user", [
            { type: "text", text: `<thread-message from="${from}">` },
            ...blocks,
            { type: "text", text: "</thread-message>" },
          ]);
        break;
      }
      case "system.message": {
        const text = (await blocksFor(storage, b.content)).map((x) => String(x.text ?? "")).join("\n");
        if (text) await add("user", [{ type: "text", text: `<system-message>\n${text}\n</system-message>` }]);
        break;
      }
      case "agent.message":
        await add("assistant", await blocksFor(storage, b.content));
        break;
      case "user.define_outcome": {
        const rubric = await rubricText(storage, b.rubric as OutcomeRecord["rubric"]);
        await add("user", [{ type: "text", text: outcomeTask(String(b.description ?? ""), rubric) }]);
        break;
      }
      case "span.outcome_evaluation_end":
        if (b.result === "needs_revision" || b.result === "max_iterations_reached")
          await add("user", [{ type: "text", text: verdictTurn(String(b.result), String(b.explanation ?? "")) }]);
        break;
      case "agent.tool_use":
      case "agent.custom_tool_use":
      case "agent.mcp_tool_use": {
        const recorded = String(b.name ?? "");
        const server = e.type === "agent.mcp_tool_use" ? String(b.mcp_server_name ?? "") : null;
        const name = e.type === "agent.custom_tool_use" ? recorded : (exposed.get(serverKey(server, recorded)) ?? recorded);
        await add("assistant", [{ type: "tool_use", id: e.id, name, input: b.input ?? {} }], e.id);
        break;
      }
      case "user.tool_result":
      case "user.custom_tool_result":
      case "agent.tool_result":
      case "agent.mcp_tool_result": {
        // A result closes the assistant turn it answers: the next response starts a new one.
        const last = turns.at(-1);
        const answered = String(b.tool_use_id ?? b.custom_tool_use_id ?? b.mcp_tool_use_id ?? "");
        if (last?.role === "assistant" && last.toolUseIds.includes(answered)) await answer(last);
        break;
      }
    }
  }
  const last = turns.at(-1);
  if (last?.role === "assistant") await answer(last);
  return turns.map((t) => ({ role: t.role, content: t.content as unknown as ContentBlockParam[] }));
}
