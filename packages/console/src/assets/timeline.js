// One session's events as a timeline: messages, tool calls with their inputs,
// results, confirmations, status changes, spans and errors.
import { useLayoutEffect, useRef, useState } from "preact/hooks";
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

const row = (event) => html`<li key=${event.id} class=${`event ${kind(event.type)}`} data-event-id=${event.id} data-type=${event.type}>
  ${body(event)}
</li>`;

const previewRow = (preview) => html`<li key=${preview.id} class="event agent preview" data-preview-id=${preview.id}>
  <strong>Agent</strong> <span class="muted">(writing…)</span>
  <p class="text">${preview.text}</p>
</li>`;

/** Above this many events only the rows in view (and a margin) are in the page: a 10,000-event session stays fast. */
export const VIRTUAL_ABOVE = 200;

export function Timeline({ events, previews = [] }) {
  if (events.length > VIRTUAL_ABOVE) return html`<${VirtualTimeline} events=${events} previews=${previews} />`;
  return html`<ol class="timeline" aria-label="Session timeline">
    ${events.map(row)} ${previews.map(previewRow)}
  </ol>`;
}

/** A row's height before it was ever rendered; rendered rows are measured and remembered. */
const ESTIMATE_PX = 60;
/** Rendered above and below the visible part, so scrolling shows rows at once. */
const OVERSCAN_PX = 600;

/** The first index in `offsets` (ascending) whose value is greater than `y`, minus one (the row holding `y`). */
function rowAt(offsets, y) {
  let lo = 0;
  let hi = offsets.length - 1;
  while (lo < hi) {
    const mid = (lo + hi + 1) >> 1;
    if (offsets[mid] <= y) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

/**
 * The timeline in a scrolling box that renders only the rows near the visible
 * part; the rest is padding of the computed height. It follows new events while
 * scrolled to the bottom (and starts there), and stays put while you read older ones.
 */
function VirtualTimeline({ events, previews }) {
  const box = useRef(null);
  const heights = useRef(new Map());
  const atBottom = useRef(true);
  const [view, setView] = useState({ top: 0, height: 800 });
  const [, setMeasured] = useState(0);

  const offsets = new Array(events.length + 1);
  offsets[0] = 0;
  for (let i = 0; i < events.length; i++) offsets[i + 1] = offsets[i] + (heights.current.get(events[i].id) ?? ESTIMATE_PX);
  const total = offsets[events.length];
  const start = Math.min(events.length - 1, rowAt(offsets, Math.max(0, view.top - OVERSCAN_PX)));
  const end = Math.min(events.length, rowAt(offsets, view.top + view.height + OVERSCAN_PX) + 1);

  useLayoutEffect(() => {
    const el = box.current;
    if (!el) return;
    // Each rendered row's height including the gap after it: the distance to the next row.
    const rows = el.querySelectorAll("li[data-event-id]");
    const gap = Number.parseFloat(getComputedStyle(el.firstElementChild).rowGap) || 0;
    let changed = false;
    rows.forEach((li, i) => {
      const next = rows[i + 1];
      const h = next ? next.offsetTop - li.offsetTop : li.offsetHeight + gap;
      const id = li.getAttribute("data-event-id");
      if (h > 0 && heights.current.get(id) !== h) {
        heights.current.set(id, h);
        changed = true;
      }
    });
    if (atBottom.current) el.scrollTop = el.scrollHeight;
    if (changed) setMeasured((m) => m + 1);
  });

  const onScroll = (e) => {
    const el = e.currentTarget;
    atBottom.current = el.scrollTop + el.clientHeight >= el.scrollHeight - 8;
    setView({ top: el.scrollTop, height: el.clientHeight });
  };
  return html`<div class="timeline-box" ref=${box} onScroll=${onScroll} tabindex="0" role="region" aria-label="Session timeline">
    <ol
      class="timeline"
      aria-label=${`Events ${start + 1} to ${end} of ${events.length}`}
      style=${`padding-top: ${offsets[start]}px; padding-bottom: ${total - offsets[end]}px`}
      data-total-events=${events.length}
    >
      ${events.slice(start, end).map(row)} ${previews.map(previewRow)}
    </ol>
  </div>`;
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
