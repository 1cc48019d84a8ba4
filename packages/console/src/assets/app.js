// The console shell: the API key (entered once, kept in localStorage), the
// navigation and a hash router, so the server serves one page for all views.
import { render } from "preact";
import { useEffect, useState } from "preact/hooks";
import { AgentPage } from "./agent.js";
import { ApiError, api, apiKey } from "./api.js";
import { html } from "./html.js";
import { AgentsPage, ConformancePage, EnvironmentsPage, ResourceList, SessionsPage } from "./pages.js";
import { SessionPage } from "./session.js";
import { VaultsPage } from "./vaults.js";

const NAV = [
  ["#/sessions", "Sessions"],
  ["#/agents", "Agents"],
  ["#/environments", "Environments"],
  ["#/vaults", "Vaults"],
  ["#/files", "Files"],
  ["#/skills", "Skills"],
  ["#/memory_stores", "Memory stores"],
  ["#/conformance", "Conformance"],
];

const LISTS = {
  files: ["Files", "/v1/files"],
  skills: ["Skills", "/v1/skills"],
  memory_stores: ["Memory stores", "/v1/memory_stores"],
};

function useHash() {
  const [hash, setHash] = useState(location.hash || "#/sessions");
  useEffect(() => {
    const onChange = () => setHash(location.hash || "#/sessions");
    addEventListener("hashchange", onChange);
    return () => removeEventListener("hashchange", onChange);
  }, []);
  return hash;
}

function Route({ hash }) {
  const [, page, id] = hash.split("/");
  if (page === "sessions" && id) return html`<${SessionPage} id=${decodeURIComponent(id)} />`;
  if (page === "agents" && id) return html`<${AgentPage} id=${decodeURIComponent(id)} />`;
  if (page === "agents") return html`<${AgentsPage} />`;
  if (page === "environments") return html`<${EnvironmentsPage} />`;
  if (page === "conformance") return html`<${ConformancePage} />`;
  if (page === "vaults") return html`<${VaultsPage} />`;
  const list = LISTS[page];
  if (list) return html`<${ResourceList} title=${list[0]} path=${list[1]} />`;
  return html`<${SessionsPage} />`;
}

function Login({ onKey }) {
  const [key, setKey] = useState("");
  const [error, setError] = useState(null);
  const submit = async (e) => {
    e.preventDefault();
    apiKey.set(key.trim());
    try {
      await api("/v1/agents", { query: { limit: 1 } });
      onKey();
    } catch (err) {
      apiKey.clear();
      setError(err instanceof ApiError && err.status === 401 ? "That API key was not accepted." : err.message);
    }
  };
  return html`<main class="login">
    <h1>OpenMA console</h1>
    <form onSubmit=${submit} class="stacked">
      <div class="field">
        <label for="api-key">API key</label>
        <input id="api-key" type="password" autocomplete="off" required value=${key} onInput=${(e) => setKey(e.currentTarget.value)} />
      </div>
      <button type="submit">Sign in</button>
      ${error ? html`<p class="error" role="alert">${error}</p>` : null}
    </form>
    <p class="muted">The key printed by <code>openma serve</code> on its first start, or your OPENMA_API_KEY. It stays in this browser.</p>
  </main>`;
}

function App() {
  const [signedIn, setSignedIn] = useState(Boolean(apiKey.get()));
  const hash = useHash();
  if (!signedIn) return html`<${Login} onKey=${() => setSignedIn(true)} />`;
  const current = `#/${hash.split("/")[1] ?? ""}`;
  return html`<header class="top">
      <a class="brand" href="#/sessions">OpenMA</a>
      <nav aria-label="Main">
        ${NAV.map(([href, label]) => html`<a href=${href} aria-current=${current === href ? "page" : undefined}>${label}</a>`)}
      </nav>
      <button
        type="button"
        class="secondary"
        onClick=${() => {
          apiKey.clear();
          setSignedIn(false);
        }}
      >
        Sign out
      </button>
    </header>
    <main><${Route} hash=${hash} /></main>`;
}

render(html`<${App} />`, document.getElementById("root"));
