// Vaults and their credentials. A credential's secret (token or value) goes
// to the server once, in the create request; the form forgets it right after
// and nothing shows it again (the API never returns it).
import { useState } from "preact/hooks";
import { api, listAll } from "./api.js";
import { html } from "./html.js";
import { ErrorText, Field, Table, useForm, useLoad, when } from "./pages.js";

const describeAuth = (auth) => {
  if (auth?.type === "environment_variable") return html`environment variable <code>${auth.secret_name}</code>`;
  if (auth?.type === "static_bearer") return html`bearer token for <code>${auth.mcp_server_url}</code>`;
  if (auth?.type === "mcp_oauth") return html`MCP OAuth for <code>${auth.mcp_server_url}</code>`;
  return auth?.type ?? "";
};

function Credentials({ vault }) {
  const path = `/v1/vaults/${encodeURIComponent(vault.id)}/credentials`;
  const credentials = useLoad(() => listAll(path, { limit: 100 }, 500), [path]);
  const [created, setCreated] = useState(null);
  const initial = { type: "environment_variable", name: "", secret: "", url: "", display: "" };
  const { form, set, error, onSubmit } = useForm(initial, async (form, setForm) => {
    const auth =
      form.type === "environment_variable"
        ? { type: "environment_variable", secret_name: form.name, secret_value: form.secret, networking: { type: "unrestricted" } }
        : { type: "static_bearer", mcp_server_url: form.url, token: form.secret };
    // The secret leaves the form state before anything else happens: it is never rendered again.
    setForm({ ...initial, type: form.type });
    const credential = await api(path, { method: "POST", body: { auth, ...(form.display ? { display_name: form.display } : {}) } });
    setCreated(credential.display_name || credential.id);
    credentials.reload();
  });
  return html`<section aria-labelledby="credentials-heading">
    <h2 id="credentials-heading">Credentials of ${vault.display_name}</h2>
    <form class="stacked" onSubmit=${onSubmit} aria-label="New credential">
      <${Field} id="cred-type" label="Kind">
        <select id="cred-type" value=${form.type} onChange=${set("type")}>
          <option value="environment_variable">Environment variable</option>
          <option value="static_bearer">MCP server bearer token</option>
        </select>
      <//>
      <${Field} id="cred-display" label="Display name"><input id="cred-display" value=${form.display} onInput=${set("display")} /><//>
      ${
        form.type === "environment_variable"
          ? html`<${Field} id="cred-name" label="Variable name"><input id="cred-name" required value=${form.name} onInput=${set("name")} /><//>`
          : html`<${Field} id="cred-url" label="MCP server URL"><input id="cred-url" type="url" required value=${form.url} onInput=${set("url")} /><//>`
      }
      <${Field} id="cred-secret" label="Secret">
        <input id="cred-secret" type="password" autocomplete="off" required value=${form.secret} onInput=${set("secret")} />
      <//>
      <button type="submit">Create credential</button>
    </form>
    ${created ? html`<p role="status">Created <strong>${created}</strong>. Its secret is stored sealed and is never shown again.</p>` : null}
    <${ErrorText} error=${error ?? credentials.error} />
    <${Table}
      caption="Credentials (secrets are never shown)"
      empty="No credentials yet."
      rows=${credentials.data}
      columns=${[
        { label: "Name", cell: (c) => c.display_name ?? "" },
        { label: "Kind", cell: (c) => describeAuth(c.auth) },
        { label: "Created", cell: (c) => when(c.created_at) },
        { label: "Id", cell: (c) => html`<code>${c.id}</code>` },
      ]}
    />
  </section>`;
}

export function VaultsPage() {
  const vaults = useLoad(() => listAll("/v1/vaults", { limit: 100 }, 500), []);
  const [selected, setSelected] = useState(null);
  const { form, set, error, onSubmit } = useForm({ name: "" }, async (form, setForm) => {
    const vault = await api("/v1/vaults", { method: "POST", body: { display_name: form.name } });
    setForm({ name: "" });
    setSelected(vault);
    vaults.reload();
  });
  return html`<section aria-labelledby="vaults-heading">
    <h1 id="vaults-heading">Vaults</h1>
    <form class="inline" onSubmit=${onSubmit} aria-label="New vault">
      <${Field} id="vault-name" label="Vault name"><input id="vault-name" required value=${form.name} onInput=${set("name")} /><//>
      <button type="submit">Create vault</button>
    </form>
    <${ErrorText} error=${error ?? vaults.error} />
    <${Table}
      caption="Vaults"
      empty="None yet."
      rows=${vaults.data}
      columns=${[
        {
          label: "Name",
          cell: (
            v,
          ) => html`<button type="button" class="link" onClick=${() => setSelected(v)} aria-label=${`Credentials of ${v.display_name}`}>
            ${v.display_name}
          </button>`,
        },
        { label: "Created", cell: (v) => when(v.created_at) },
        { label: "Id", cell: (v) => html`<code>${v.id}</code>` },
      ]}
    />
    ${selected ? html`<${Credentials} key=${selected.id} vault=${selected} />` : null}
  </section>`;
}
