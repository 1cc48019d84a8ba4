// The list pages: sessions (with status filter and a new-session form),
// agents, environments, the driver conformance table, and read-only lists of
// vaults, files, skills and memory stores.
import { useEffect, useState } from "preact/hooks";
import { api, download, listAll } from "./api.js";
import { html } from "./html.js";

const STATUSES = ["idle", "running", "rescheduling", "terminated"];
export const when = (iso) => (iso ? new Date(iso).toLocaleString() : "");

/** Loads `load()` on mount and whenever `deps` change; `reload` runs it again. */
export function useLoad(load, deps) {
  const [state, setState] = useState({ data: null, error: null });
  const [revision, setRevision] = useState(0);
  useEffect(() => {
    let live = true;
    load().then(
      (data) => live && setState({ data, error: null }),
      (err) => live && setState({ data: null, error: err.message }),
    );
    return () => {
      live = false;
    };
  }, [...deps, revision]);
  return { ...state, reload: () => setRevision((r) => r + 1) };
}

export function Table({ caption, columns, rows, empty }) {
  if (!rows) return html`<p class="muted">Loading…</p>`;
  if (rows.length === 0) return html`<p class="muted">${empty}</p>`;
  return html`<table>
    <caption>${caption}</caption>
    <thead>
      <tr>${columns.map((c) => html`<th scope="col">${c.label}</th>`)}</tr>
    </thead>
    <tbody>
      ${rows.map((row) => html`<tr key=${row.id ?? row.driver}>${columns.map((c) => html`<td>${c.cell(row)}</td>`)}</tr>`)}
    </tbody>
  </table>`;
}

/** A form's values, its change handlers and its submit, which shows the error it throws. */
export function useForm(initial, submit) {
  const [form, setForm] = useState(initial);
  const [error, setError] = useState(null);
  const set = (key) => (e) => setForm({ ...form, [key]: e.currentTarget.value });
  const onSubmit = async (e) => {
    e.preventDefault();
    try {
      await submit(form, setForm);
      setError(null);
    } catch (err) {
      setError(err.message);
    }
  };
  return { form, set, error, onSubmit };
}

export function Field({ id, label, children }) {
  return html`<div class="field"><label for=${id}>${label}</label>${children}</div>`;
}

export function ErrorText({ error }) {
  return error ? html`<p class="error" role="alert">${error}</p>` : null;
}

export function SessionsPage() {
  const [status, setStatus] = useState("");
  const sessions = useLoad(() => listAll("/v1/sessions", { limit: 100, statuses: status || undefined }, 500), [status]);
  const options = useLoad(
    () => Promise.all([listAll("/v1/agents", { limit: 100 }, 500), listAll("/v1/environments", { limit: 100 }, 500)]),
    [],
  );
  const [agents, environments] = options.data ?? [[], []];
  const { form, set, error, onSubmit } = useForm({ agent: "", environment: "", title: "" }, async (form) => {
    const body = {
      agent: form.agent || agents[0]?.id,
      environment_id: form.environment || environments[0]?.id,
      ...(form.title ? { title: form.title } : {}),
    };
    const session = await api("/v1/sessions", { method: "POST", body });
    location.hash = `#/sessions/${session.id}`;
  });
  return html`<section aria-labelledby="sessions-heading">
    <h1 id="sessions-heading">Sessions</h1>
    <form class="inline" onSubmit=${onSubmit} aria-label="New session">
      <${Field} id="new-session-agent" label="Agent">
        <select id="new-session-agent" value=${form.agent || agents[0]?.id} onChange=${set("agent")}>
          ${agents.map((a) => html`<option value=${a.id}>${a.name}</option>`)}
        </select>
      <//>
      <${Field} id="new-session-environment" label="Environment">
        <select
          id="new-session-environment"
          value=${form.environment || environments[0]?.id}
          onChange=${set("environment")}
        >
          ${environments.map((env) => html`<option value=${env.id}>${env.name}</option>`)}
        </select>
      <//>
      <${Field} id="new-session-title" label="Title">
        <input id="new-session-title" value=${form.title} onInput=${set("title")} />
      <//>
      <button type="submit" disabled=${agents.length === 0 || environments.length === 0}>Start session</button>
    </form>
    <${ErrorText} error=${error ?? sessions.error} />
    <div class="inline">
      <${Field} id="status-filter" label="Status">
        <select id="status-filter" value=${status} onChange=${(e) => setStatus(e.currentTarget.value)}>
          <option value="">All</option>
          ${STATUSES.map((s) => html`<option value=${s}>${s}</option>`)}
        </select>
      <//>
    </div>
    <${Table}
      caption="Sessions, newest first"
      empty="No sessions."
      rows=${sessions.data}
      columns=${[
        { label: "Session", cell: (s) => html`<a href=${`#/sessions/${s.id}`}>${s.title || s.id}</a>` },
        { label: "Agent", cell: (s) => s.agent?.name ?? "" },
        { label: "Status", cell: (s) => s.status },
        { label: "Created", cell: (s) => when(s.created_at) },
      ]}
    />
  </section>`;
}

export function AgentsPage() {
  const agents = useLoad(() => listAll("/v1/agents", { limit: 100 }, 500), []);
  const initial = { name: "", model: "claude-sonnet-4-5", system: "", tools: "always_allow" };
  const { form, set, error, onSubmit } = useForm(initial, async (form, setForm) => {
    const tools =
      form.tools === "none" ? [] : [{ type: "agent_toolset_20260401", default_config: { permission_policy: { type: form.tools } } }];
    await api("/v1/agents", {
      method: "POST",
      body: { name: form.name, model: form.model, ...(form.system ? { system: form.system } : {}), tools },
    });
    setForm({ ...form, name: "", system: "" });
    agents.reload();
  });
  return html`<section aria-labelledby="agents-heading">
    <h1 id="agents-heading">Agents</h1>
    <form class="stacked" onSubmit=${onSubmit} aria-label="New agent">
      <h2>New agent</h2>
      <${Field} id="agent-name" label="Name"><input id="agent-name" required value=${form.name} onInput=${set("name")} /><//>
      <${Field} id="agent-model" label="Model"><input id="agent-model" required value=${form.model} onInput=${set("model")} /><//>
      <${Field} id="agent-system" label="System prompt"><textarea id="agent-system" rows="2" value=${form.system} onInput=${set("system")}></textarea><//>
      <${Field} id="agent-tools" label="Agent toolset">
        <select id="agent-tools" value=${form.tools} onChange=${set("tools")}>
          <option value="always_allow">Built-in tools, always allowed</option>
          <option value="always_ask">Built-in tools, ask before each call</option>
          <option value="none">No tools</option>
        </select>
      <//>
      <button type="submit">Create agent</button>
    </form>
    <${ErrorText} error=${error ?? agents.error} />
    <${Table}
      caption="Agents"
      empty="No agents yet."
      rows=${agents.data}
      columns=${[
        { label: "Name", cell: (a) => html`<a href=${`#/agents/${a.id}`}>${a.name}</a>` },
        { label: "Model", cell: (a) => (typeof a.model === "string" ? a.model : a.model?.id) },
        { label: "Version", cell: (a) => a.version },
        { label: "Tools", cell: (a) => (a.tools ?? []).map((t) => t.name ?? t.type).join(", ") },
        { label: "Id", cell: (a) => html`<code>${a.id}</code>` },
      ]}
    />
  </section>`;
}

const lines = (text) =>
  text
    .split(/[\s,]+/)
    .map((s) => s.trim())
    .filter(Boolean);

export function EnvironmentsPage() {
  const environments = useLoad(() => listAll("/v1/environments", { limit: 100 }, 500), []);
  // A self-hosted environment's worker key is in the create response only: shown once, never again.
  const [createdKey, setCreatedKey] = useState(null);
  const initial = { name: "", type: "cloud", networking: "unrestricted", apt: "", pip: "", npm: "" };
  const { form, set, error, onSubmit } = useForm(initial, async (form, setForm) => {
    const packages = Object.fromEntries(["apt", "pip", "npm"].flatMap((m) => (lines(form[m]).length ? [[m, lines(form[m])]] : [])));
    const config =
      form.type === "cloud"
        ? { type: "cloud", networking: { type: form.networking }, ...(Object.keys(packages).length ? { packages } : {}) }
        : { type: form.type };
    const created = await api("/v1/environments", { method: "POST", body: { name: form.name, config } });
    setCreatedKey(created.environment_key ? { name: created.name, key: created.environment_key } : null);
    setForm({ ...form, name: "" });
    environments.reload();
  });
  return html`<section aria-labelledby="environments-heading">
    <h1 id="environments-heading">Environments</h1>
    <form class="stacked" onSubmit=${onSubmit} aria-label="New environment">
      <h2>New environment</h2>
      <${Field} id="env-name" label="Name"><input id="env-name" required value=${form.name} onInput=${set("name")} /><//>
      <${Field} id="env-type" label="Type">
        <select id="env-type" value=${form.type} onChange=${set("type")}>
          <option value="cloud">Cloud (sandboxes run by this server)</option>
          <option value="self_hosted">Self-hosted (your workers)</option>
          <option value="none">No sandbox</option>
        </select>
      <//>
      ${
        form.type === "cloud"
          ? html`<${Field} id="env-networking" label="Networking">
              <select id="env-networking" value=${form.networking} onChange=${set("networking")}>
                <option value="unrestricted">Unrestricted</option>
                <option value="limited">Limited</option>
              </select>
            <//>
            <${Field} id="env-apt" label="apt packages"><input id="env-apt" value=${form.apt} onInput=${set("apt")} /><//>
            <${Field} id="env-pip" label="pip packages"><input id="env-pip" value=${form.pip} onInput=${set("pip")} /><//>
            <${Field} id="env-npm" label="npm packages"><input id="env-npm" value=${form.npm} onInput=${set("npm")} /><//>`
          : null
      }
      <button type="submit">Create environment</button>
    </form>
    ${
      createdKey
        ? html`<div class="action" role="status">
          <span>Environment key of <strong>${createdKey.name}</strong> (shown once; give it to your workers):</span>
          <code data-testid="environment-key">${createdKey.key}</code>
        </div>`
        : null
    }
    <${ErrorText} error=${error ?? environments.error} />
    <${Table}
      caption="Environments"
      empty="No environments yet."
      rows=${environments.data}
      columns=${[
        { label: "Name", cell: (e) => e.name },
        { label: "Type", cell: (e) => e.config?.type },
        { label: "Networking", cell: (e) => e.config?.networking?.type ?? "" },
        { label: "Runtime", cell: (e) => html`<${RuntimeStatus} environment=${e} />` },
        { label: "Id", cell: (e) => html`<code>${e.id}</code>` },
      ]}
    />
  </section>`;
}

/**
 * An environment's runtime: its work queue (depth, pending, workers polling),
 * its sessions' sandboxes per driver (the stats endpoint's OpenMA `sandboxes`
 * field; each driver links to its conformance row) and a warm pool when the
 * server reports one.
 */
let conformance = null;
/** The conformance table (/console/conformance.json), fetched once per page load. */
const conformanceTable = () => {
  conformance ??= fetch("/console/conformance.json").then((r) => r.json());
  return conformance;
};
/** A driver's conformance row by its owner-record name (`docker` is the `node-docker` row). */
const conformanceOf = (table, driver) => table?.data?.find((row) => row.driver === driver || row.driver.endsWith(`-${driver}`));

function RuntimeStatus({ environment }) {
  const stats = useLoad(
    () => Promise.all([api(`/v1/environments/${encodeURIComponent(environment.id)}/work/stats`), conformanceTable().catch(() => null)]),
    [environment.id],
  );
  if (stats.error) return html`<span class="muted">unavailable</span>`;
  if (!stats.data) return html`<span class="muted">…</span>`;
  const [s, table] = stats.data;
  const drivers = s.sandboxes ?? [];
  return html`<span data-testid=${`runtime-${environment.name}`}>
    ${s.depth} queued, ${s.pending} pending, ${s.workers_polling ?? 0} workers polling
    <br />
    ${
      drivers.length === 0
        ? html`<span class="muted">no sandboxes running</span>`
        : drivers.map(
            (d) => html`<span key=${d.driver}
              >Sandbox driver <a href="#/conformance">${d.driver}</a>${conformanceOf(table, d.driver) ? ` (${conformanceOf(table, d.driver).class})` : ""}:${" "}${d.owned} running, ${d.idle} idle${d.orphaned ? `, ${d.orphaned} orphaned` : ""}.
            </span>`,
          )
    }
    ${s.warm_pool ? html`<br />Warm pool: ${s.warm_pool.ready ?? 0} ready of ${s.warm_pool.size ?? "?"}` : null}
  </span>`;
}

export function ConformancePage() {
  const table = useLoad(conformanceTable, []);
  return html`<section aria-labelledby="conformance-heading">
    <h1 id="conformance-heading">Sandbox driver conformance</h1>
    <p class="muted">What each sandbox driver of this build delivers (unbuilt drivers show what they are planned to offer).</p>
    <${ErrorText} error=${table.error} />
    <${Table}
      caption="Drivers"
      empty="No drivers."
      rows=${table.data?.data}
      columns=${[
        { label: "Driver", cell: (d) => html`<code>${d.driver}</code>` },
        { label: "Status", cell: (d) => d.status },
        { label: "Class", cell: (d) => d.class },
        { label: "Lanes", cell: (d) => d.lanes.join(", ") || "—" },
        { label: "Suspend/resume", cell: (d) => d.suspend_resume },
        { label: "Workspace", cell: (d) => d.workspace },
        { label: "Outputs", cell: (d) => d.outputs.join(", ") || "—" },
        { label: "Credential egress", cell: (d) => d.credential_egress },
      ]}
    />
  </section>`;
}

/** A file's download button (uploads are downloadable; files a session produced may not be). */
export function DownloadButton({ file }) {
  const [error, setError] = useState(null);
  return html`<button
      type="button"
      class="link"
      disabled=${!file.downloadable}
      aria-label=${`Download ${file.filename}`}
      onClick=${() => download(file.id, file.filename).catch((err) => setError(err.message))}
    >
      Download</button
    >${error ? html` <span class="error" role="alert">${error}</span>` : null}`;
}

/** A read-only list of one resource family. */
export function ResourceList({ title, path }) {
  const items = useLoad(() => listAll(path, { limit: 100 }, 500), [path]);
  const id = `${path.replace(/\W/g, "-")}-heading`;
  return html`<section aria-labelledby=${id}>
    <h1 id=${id}>${title}</h1>
    <${ErrorText} error=${items.error} />
    <${Table}
      caption=${title}
      empty="None yet."
      rows=${items.data}
      columns=${[
        { label: "Name", cell: (r) => r.display_name ?? r.name ?? r.display_title ?? r.filename ?? "" },
        { label: "Id", cell: (r) => html`<code>${r.id}</code>` },
        { label: "Created", cell: (r) => when(r.created_at) },
        ...(path === "/v1/files" ? [{ label: "Content", cell: (f) => html`<${DownloadButton} file=${f} />` }] : []),
      ]}
    />
  </section>`;
}
