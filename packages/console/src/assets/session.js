// One session: its live timeline, the message box, interrupt, answers to
// tool calls that wait for the user, usage, its outputs and its workspace.
import { useEffect, useState } from "preact/hooks";
import { api } from "./api.js";
import { followSession } from "./events.js";
import { html } from "./html.js";
import { DownloadButton } from "./pages.js";
import { pendingActions, Timeline, usageText } from "./timeline.js";
import { WorkspaceBrowser } from "./workspace.js";

const STREAM_LABEL = { connecting: "Connecting…", live: "Live", reconnecting: "Reconnecting…", ended: "Stream ended" };

const send = (sessionId, events) => api(`/v1/sessions/${encodeURIComponent(sessionId)}/events`, { method: "POST", body: { events } });

function ToolAnswer({ sessionId, event, onError }) {
  const [reply, setReply] = useState("");
  const answer = (events) => send(sessionId, events).catch((err) => onError(err.message));
  if (event.type === "agent.custom_tool_use") {
    const id = `custom-result-${event.id}`;
    return html`<form
      class="action"
      onSubmit=${(e) => {
        e.preventDefault();
        answer([{ type: "user.custom_tool_result", custom_tool_use_id: event.id, content: [{ type: "text", text: reply }] }]);
      }}
    >
      <label for=${id}>Result for <code>${event.name}</code></label>
      <input id=${id} value=${reply} onInput=${(e) => setReply(e.currentTarget.value)} />
      <button type="submit">Send result</button>
    </form>`;
  }
  return html`<div class="action" role="group" aria-label=${`Confirm tool call ${event.name}`}>
    <span><code>${event.name}</code> waits for your confirmation</span>
    <button type="button" onClick=${() => answer([{ type: "user.tool_confirmation", tool_use_id: event.id, result: "allow" }])}>
      Approve
    </button>
    <button
      type="button"
      class="secondary"
      onClick=${() => answer([{ type: "user.tool_confirmation", tool_use_id: event.id, result: "deny", deny_message: "Denied in the console" }])}
    >
      Deny
    </button>
  </div>`;
}

/**
 * Outputs are collected just after a turn ends (ADR 0023), so the list is read
 * again shortly after each status change, and every few seconds while the page is open.
 */
const OUTPUT_RECHECK_MS = [0, 1500];
const OUTPUT_REFRESH_MS = 5000;

function Outputs({ sessionId, revision }) {
  const [files, setFiles] = useState(null);
  useEffect(() => {
    let live = true;
    const load = () =>
      api("/v1/files", { query: { scope_id: sessionId, limit: 100 } })
        .then((res) => live && setFiles([...res.data].sort((a, b) => a.filename.localeCompare(b.filename))))
        .catch(() => live && setFiles([]));
    const timers = OUTPUT_RECHECK_MS.map((ms) => setTimeout(load, ms));
    const refresh = setInterval(load, OUTPUT_REFRESH_MS);
    return () => {
      live = false;
      for (const t of timers) clearTimeout(t);
      clearInterval(refresh);
    };
  }, [sessionId, revision]);
  if (!files) return null;
  return html`<section aria-labelledby="outputs-heading">
    <h2 id="outputs-heading">Outputs</h2>
    ${
      files.length === 0
        ? html`<p class="muted">No outputs yet: files the agent writes to <code>/mnt/session/outputs</code> appear here after its turn.</p>`
        : html`<ul class="files" aria-label="Session outputs">
          ${files.map(
            (f) => html`<li key=${f.id}>
              <code>${f.filename}</code> <span class="muted">${f.size_bytes} bytes</span> <${DownloadButton} file=${f} />
            </li>`,
          )}
        </ul>`
    }
  </section>`;
}

export function SessionPage({ id }) {
  const [session, setSession] = useState(null);
  const [events, setEvents] = useState([]);
  const [previews, setPreviews] = useState([]);
  const [stream, setStream] = useState("connecting");
  const [error, setError] = useState(null);
  const [message, setMessage] = useState("");

  useEffect(() => {
    api(`/v1/sessions/${encodeURIComponent(id)}`)
      .then(setSession)
      .catch((err) => setError(err.message));
    return followSession(id, { onChange: setEvents, onPreviews: setPreviews, onState: setStream, onError: setError });
  }, [id]);
  // The status (and usage) as of the latest status change in the timeline.
  const statusEvents = events.filter((e) => e.type.startsWith("session.status_")).length;
  useEffect(() => {
    if (statusEvents > 0) api(`/v1/sessions/${encodeURIComponent(id)}`).then(setSession, () => {});
  }, [id, statusEvents]);

  const pending = pendingActions(events);
  const usage = session?.usage;
  return html`<section aria-labelledby="session-heading">
    <h1 id="session-heading">${session?.title || "Session"} <code class="small">${id}</code></h1>
    <p>
      Status: <strong data-testid="session-status">${session?.status ?? "…"}</strong>
      <span class="muted"> · Agent ${session?.agent?.name ?? ""}</span>
      <span class=${`stream ${stream}`} role="status"> · ${STREAM_LABEL[stream]}</span>
    </p>
    ${
      usage
        ? html`<p class="muted">
          Usage: ${usageText(usage)}${usage.active_seconds !== undefined ? ` · ${usage.active_seconds} s active` : ""}
        </p>`
        : null
    }
    ${error ? html`<p class="error" role="alert">${error}</p>` : null}
    <${Timeline} events=${events} previews=${previews} />
    ${pending.map((event) => html`<${ToolAnswer} key=${event.id} sessionId=${id} event=${event} onError=${setError} />`)}
    <form
      class="composer"
      onSubmit=${(e) => {
        e.preventDefault();
        if (!message.trim()) return;
        send(id, [{ type: "user.message", content: [{ type: "text", text: message }] }])
          .then(() => setMessage(""))
          .catch((err) => setError(err.message));
      }}
    >
      <label for="message">Message</label>
      <textarea id="message" rows="3" value=${message} onInput=${(e) => setMessage(e.currentTarget.value)}></textarea>
      <div class="row">
        <button type="submit">Send</button>
        <button type="button" class="secondary" onClick=${() => send(id, [{ type: "user.interrupt" }]).catch((err) => setError(err.message))}>
          Interrupt
        </button>
      </div>
    </form>
    ${
      session
        ? html`<${Outputs} sessionId=${id} revision=${statusEvents} />
          <${WorkspaceBrowser} sessionId=${id} revision=${statusEvents} />`
        : null
    }
  </section>`;
}
