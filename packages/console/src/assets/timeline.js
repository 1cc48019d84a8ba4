// One session's events as a timeline: messages, tool calls with their inputs,
// results, confirmations, status changes, spans and errors.
import { html } from "./html.js";

const text = (content) =>
  (Array.isArray(content) ? content : []).map((block) => (block.type === "text" ? block.text : `[${block.type}]`)).join("\n");

const json = (value) => JSON.stringify(value, null, 2);

/** Token counts and list cost of a usage object (the session's, or a `session.usage` event). */
export function usageText(usage) {
  const cost = usage.list_cost ? ` · ${usage.list_cost.amount} ${usage.list_cost.currency} at list prices` : "";
  return `${usage.input_tokens ?? 0} input, ${usage.output_tokens ?? 0} output tokens${cost}`;
}

function body(event) {
  switch (event.type) {
    case "user.message":
      return html`<strong>You</strong><p class="text">${text(event.content)}</p>`;
    case "agent.message":
      return html`<strong>Agent</strong><p class="text">${text(event.content)}</p>`;
    case "agent.thinking":
      return html`<em>Agent is thinking</em>`;
    case "agent.tool_use":
    case "agent.mcp_tool_use":
    case "agent.custom_tool_use":
      return html`<strong>Tool call: <code>${event.name}</code></strong>
        ${event.evaluated_permission === "ask" ? html` <span class="badge">needs confirmation</span>` : null}
        <pre>${json(event.input)}</pre>`;
    case "agent.tool_result":
    case "agent.mcp_tool_result":
    case "user.custom_tool_result":
    case "user.tool_result":
      return html`<strong>${event.is_error ? "Tool error" : "Tool result"}</strong><pre>${text(event.content)}</pre>`;
    case "user.tool_confirmation":
      return html`<strong>${event.result === "allow" ? "You approved the tool call" : "You denied the tool call"}</strong>
        ${event.deny_message ? html`<p class="text">${event.deny_message}</p>` : null}`;
    case "user.interrupt":
      return html`<strong>You interrupted the agent</strong>`;
    case "session.error":
      return html`<strong>Error</strong><p class="text">${event.error?.message ?? json(event.error)}</p>`;
    case "session.status_idle":
      return html`Session idle${event.stop_reason?.type ? ` (${event.stop_reason.type.replace("_", " ")})` : ""}`;
    case "session.status_running":
      return html`Session running`;
    case "session.status_rescheduled":
      return html`Session rescheduled`;
    case "session.status_terminated":
      return html`Session terminated`;
    case "span.model_request_end": {
      const usage = event.model_usage ?? {};
      return html`Model request finished: ${usage.input_tokens ?? 0} in / ${usage.output_tokens ?? 0} out tokens`;
    }
    case "session.usage":
      return html`Usage so far: ${usageText(event)}`;
    case "span.model_request_start":
      return html`Model request started`;
    default:
      return html`<code>${event.type}</code>`;
  }
}

function kind(type) {
  if (type === "session.error") return "error";
  if (type.startsWith("session.") || type.startsWith("span.")) return "meta";
  if (type.startsWith("user.")) return "user";
  return "agent";
}

export function Timeline({ events, previews = [] }) {
  return html`<ol class="timeline" aria-label="Session timeline">
    ${events.map(
      (event) => html`<li key=${event.id} class=${`event ${kind(event.type)}`} data-event-id=${event.id} data-type=${event.type}>
        ${body(event)}
      </li>`,
    )}
    ${previews.map(
      (preview) => html`<li key=${preview.id} class="event agent preview" data-preview-id=${preview.id}>
        <strong>Agent</strong> <span class="muted">(writing…)</span>
        <p class="text">${preview.text}</p>
      </li>`,
    )}
  </ol>`;
}

/** Tool calls still waiting for an answer: `always_ask` confirmations and custom tools. */
export function pendingActions(events) {
  const answered = new Set();
  for (const e of events) {
    if (e.type === "user.tool_confirmation") answered.add(e.tool_use_id);
    if (e.type === "user.custom_tool_result") answered.add(e.custom_tool_use_id);
    if (e.type === "agent.tool_result" || e.type === "agent.mcp_tool_result") answered.add(e.tool_use_id ?? e.mcp_tool_use_id);
  }
  return events.filter(
    (e) =>
      !answered.has(e.id) &&
      (e.type === "agent.custom_tool_use" ||
        ((e.type === "agent.tool_use" || e.type === "agent.mcp_tool_use") && e.evaluated_permission === "ask")),
  );
}
