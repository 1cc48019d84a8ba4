// A session's workspace, browsed through the OpenMA extension routes
// (`/v1/sessions/{id}/workspace` and `.../workspace/content`, docs/api.md):
// directories open in place, files download, symlinks are shown but never
// followed (the server refuses them).
import { useEffect, useState } from "preact/hooks";
import { api, saveFrom } from "./api.js";
import { html } from "./html.js";

const base = (sessionId) => `/v1/sessions/${encodeURIComponent(sessionId)}/workspace`;

function Entry({ sessionId, entry, open, onError }) {
  if (entry.type === "directory") {
    return html`<button type="button" class="link" onClick=${() => open(entry.path)} aria-label=${`Open folder ${entry.path}`}>
      ${entry.name}/
    </button>`;
  }
  if (entry.type === "file") {
    const get = () =>
      saveFrom(`${base(sessionId)}/content?path=${encodeURIComponent(entry.path)}`, entry.name).catch((err) => onError(err.message));
    return html`<code>${entry.name}</code>${" "}<button type="button" class="link" onClick=${get} aria-label=${`Download ${entry.path} from the workspace`}>Download</button>`;
  }
  return html`<code>${entry.name}</code> <span class="muted">(${entry.type === "symlink" ? "symbolic link, not followed" : "not a regular file"})</span>`;
}

export function WorkspaceBrowser({ sessionId, revision }) {
  const [path, setPath] = useState("");
  const [listing, setListing] = useState(null);
  const [error, setError] = useState(null);
  useEffect(() => {
    let live = true;
    api(base(sessionId), { query: { path } }).then(
      (res) => {
        if (!live) return;
        setListing(res);
        setError(null);
      },
      (err) => {
        if (!live) return;
        setListing(null);
        // The root's 404: this server keeps no browsable workspace for the session (a remote sandbox, a self-hosted worker).
        setError(path === "" && err.status === 404 ? { quiet: "No browsable workspace on this server for this session." } : err.message);
      },
    );
    return () => {
      live = false;
    };
  }, [sessionId, path, revision]);
  const parts = path === "" ? [] : path.split("/");
  return html`<section aria-labelledby="workspace-heading">
    <h2 id="workspace-heading">Workspace</h2>
    <nav aria-label="Workspace path" class="crumbs">
      <button type="button" class="link" onClick=${() => setPath("")}>/workspace</button>
      ${parts.map(
        (part, i) => html` / <button type="button" class="link" onClick=${() => setPath(parts.slice(0, i + 1).join("/"))}>${part}</button>`,
      )}
    </nav>
    ${error?.quiet ? html`<p class="muted">${error.quiet}</p>` : error ? html`<p class="error" role="alert">${error}</p>` : null}
    ${
      listing && listing.entries.length === 0
        ? html`<p class="muted">This folder is empty.</p>`
        : listing
          ? html`<ul class="files" aria-label=${`Workspace folder /${path}`}>
            ${listing.entries.map(
              (entry) => html`<li key=${entry.path} data-workspace-path=${entry.path}>
                <${Entry} sessionId=${sessionId} entry=${entry} open=${setPath} onError=${setError} />
                ${entry.type === "file" ? html` <span class="muted">${entry.size_bytes} bytes</span>` : null}
              </li>`,
            )}
          </ul>`
          : null
    }
    ${listing?.truncated ? html`<p class="muted">Only the first ${listing.entries.length} entries are shown.</p>` : null}
  </section>`;
}
