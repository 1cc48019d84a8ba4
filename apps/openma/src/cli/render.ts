/** One line (or a few) per session event, for people: agent text, tool calls with their inputs, results, status changes. */
import type { SessionEvent } from "./follow.ts";
import type { Paint } from "./style.ts";

type Block = { type: string; text?: string };

function text(content: unknown): string {
  if (typeof content === "string") return content;
  if (!Array.isArray(content)) return "";
  return (content as Block[]).map((b) => (b.type === "text" ? (b.text ?? "") : `[${b.type}]`)).join("");
}

const brief = (value: unknown, max = 400) => {
  const s = typeof value === "string" ? value : JSON.stringify(value);
  return s.length > max ? `${s.slice(0, max)}…` : s;
};

/** The event as text, or null for events people do not need to see (spans, usage, deltas). */
export function renderEvent(e: SessionEvent, paint: Paint): string | null {
  const ev = e as SessionEvent & Record<string, unknown>;
  switch (e.type) {
    case "user.message":
      return `${paint("bold", "you")}: ${text(ev.content)}`;
    case "agent.message":
      return `${paint(["bold", "cyan"], "agent")}: ${text(ev.content)}`;
    case "agent.thinking":
      return paint("dim", "agent is thinking…");
    case "agent.tool_use":
    case "agent.mcp_tool_use":
    case "agent.custom_tool_use":
      return `${paint("yellow", "→ tool")} ${paint("bold", String(ev.name))} ${paint("dim", brief(ev.input))}`;
    case "agent.tool_result":
    case "agent.mcp_tool_result": {
      const failed = ev.is_error === true;
      return `${paint(failed ? "red" : "green", failed ? "← error" : "← result")} ${brief(text(ev.content))}`;
    }
    case "user.tool_confirmation":
      return paint("dim", `confirmation: ${String(ev.result)}`);
    case "user.custom_tool_result":
      return paint("dim", `custom tool result: ${brief(text(ev.content))}`);
    case "user.interrupt":
      return paint("magenta", "interrupted");
    case "session.status_running":
      return paint("dim", "[running]");
    case "session.status_idle": {
      const reason = (ev.stop_reason as { type?: string } | undefined)?.type ?? "idle";
      return paint(reason === "requires_action" ? "yellow" : "dim", `[idle: ${reason}]`);
    }
    case "session.status_rescheduled":
      return paint("yellow", "[rescheduled]");
    case "session.status_terminated":
      return paint("red", "[terminated]");
    case "session.deleted":
      return paint("red", "[deleted]");
    case "session.error": {
      const error = ev.error as { type?: string; message?: string } | undefined;
      return paint("red", `error: ${error?.type ?? "unknown"}${error?.message ? `: ${error.message}` : ""}`);
    }
    default:
      return null;
  }
}
