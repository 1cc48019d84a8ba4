// One agent: edit it (each change is a new version, sent with the version it
// was read at so a concurrent edit is refused, not lost) and its version
// history, each version shown as what changed from the one before.
import { useEffect, useState } from "preact/hooks";
import { api, listAll } from "./api.js";
import { html } from "./html.js";

/** Bookkeeping fields every version changes. */
const UNCOMPARED = new Set(["version", "updated_at", "created_at"]);
const show = (value) => (value === undefined ? "—" : typeof value === "string" ? value : JSON.stringify(value, null, 2));

/** The top-level fields whose values differ between two versions of an agent. */
export function agentDiff(before, after) {
  const keys = [...new Set([...Object.keys(before), ...Object.keys(after)])].filter((k) => !UNCOMPARED.has(k));
  return keys
    .filter((k) => JSON.stringify(before[k]) !== JSON.stringify(after[k]))
    .map((k) => ({ field: k, before: before[k], after: after[k] }));
}

function Diff({ before, after }) {
  if (!before) return html`<p class="muted">First version.</p>`;
  const changes = agentDiff(before, after);
  if (changes.length === 0) return html`<p class="muted">No field changed.</p>`;
  return html`<table class="diff">
    <caption>Changes from version ${before.version}</caption>
    <thead>
      <tr><th scope="col">Field</th><th scope="col">Before</th><th scope="col">After</th></tr>
    </thead>
    <tbody>
      ${changes.map(
        (c) => html`<tr key=${c.field}>
          <th scope="row"><code>${c.field}</code></th>
          <td><del><pre>${show(c.before)}</pre></del></td>
          <td><ins><pre>${show(c.after)}</pre></ins></td>
        </tr>`,
      )}
    </tbody>
  </table>`;
}

export function AgentPage({ id }) {
  const path = `/v1/agents/${encodeURIComponent(id)}`;
  const [agent, setAgent] = useState(null);
  const [versions, setVersions] = useState([]);
  const [form, setForm] = useState(null);
  const [error, setError] = useState(null);
  const load = () =>
    Promise.all([api(path), listAll(`${path}/versions`, { limit: 100 }, 1000)]).then(
      ([a, v]) => {
        setAgent(a);
        setVersions(v);
        setForm({ name: a.name, model: typeof a.model === "string" ? a.model : a.model.id, system: a.system ?? "" });
      },
      (err) => setError(err.message),
    );
  useEffect(() => {
    load();
  }, [id]);
  if (!agent || !form) return html`<p class="muted">${error ?? "Loading…"}</p>`;
  const set = (key) => (e) => setForm({ ...form, [key]: e.currentTarget.value });
  const save = async (e) => {
    e.preventDefault();
    try {
      await api(path, {
        method: "POST",
        body: { version: agent.version, name: form.name, model: form.model, system: form.system || null },
      });
      setError(null);
      await load();
    } catch (err) {
      setError(err.message);
    }
  };
  return html`<section aria-labelledby="agent-heading">
    <h1 id="agent-heading">${agent.name} <code class="small">${agent.id}</code></h1>
    <p>Version <strong data-testid="agent-version">${agent.version}</strong></p>
    <form class="stacked" onSubmit=${save} aria-label="Edit agent">
      <h2>Edit (saves a new version)</h2>
      <div class="field"><label for="edit-name">Name</label><input id="edit-name" required value=${form.name} onInput=${set("name")} /></div>
      <div class="field"><label for="edit-model">Model</label><input id="edit-model" required value=${form.model} onInput=${set("model")} /></div>
      <div class="field">
        <label for="edit-system">System prompt</label>
        <textarea id="edit-system" rows="4" value=${form.system} onInput=${set("system")}></textarea>
      </div>
      <button type="submit">Save new version</button>
      ${error ? html`<p class="error" role="alert">${error}</p>` : null}
    </form>
    <section aria-labelledby="versions-heading">
      <h2 id="versions-heading">Version history</h2>
      <ol class="versions">
        ${versions.map(
          (v, i) => html`<li key=${v.version} data-version=${v.version}>
            <strong>Version ${v.version}</strong> <span class="muted">${new Date(v.updated_at).toLocaleString()}</span>
            <${Diff} before=${versions[i + 1]} after=${v} />
          </li>`,
        )}
      </ol>
    </section>
  </section>`;
}
