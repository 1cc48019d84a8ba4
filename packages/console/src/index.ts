/**
 * The console: a browser UI that talks only to the public `/v1` API (with the
 * API key the person enters), served as plain ES modules. No build step: the
 * UI library (preact + htm) is served straight from node_modules, wired by an
 * import map in index.html (docs/adr/0012-console.md).
 */
import { readFile } from "node:fs/promises";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { type Env, Hono } from "hono";
import { conformanceRows } from "./conformance.ts";

const ASSETS_DIR = join(dirname(fileURLToPath(import.meta.url)), "assets");

/** The console's own files: a fixed list, so no request path ever reaches the filesystem. */
const ASSETS: Record<string, string> = {
  "index.html": "text/html; charset=utf-8",
  "agent.js": "text/javascript; charset=utf-8",
  "app.js": "text/javascript; charset=utf-8",
  "html.js": "text/javascript; charset=utf-8",
  "api.js": "text/javascript; charset=utf-8",
  "events.js": "text/javascript; charset=utf-8",
  "timeline.js": "text/javascript; charset=utf-8",
  "pages.js": "text/javascript; charset=utf-8",
  "session.js": "text/javascript; charset=utf-8",
  "workspace.js": "text/javascript; charset=utf-8",
  "vaults.js": "text/javascript; charset=utf-8",
  "styles.css": "text/css; charset=utf-8",
};

/** The UI library's browser builds, by the name the import map gives them. */
// Resolved as the server itself would import them: the packages' ES module builds.
const VENDOR: Record<string, string> = {
  "preact.js": fileURLToPath(import.meta.resolve("preact")),
  "hooks.js": fileURLToPath(import.meta.resolve("preact/hooks")),
  "htm.js": fileURLToPath(import.meta.resolve("htm")),
};

const JS = "text/javascript; charset=utf-8";

/** Files are read once and kept: they never change while the server runs. */
function cachedFile(path: string): () => Promise<string> {
  let text: Promise<string> | null = null;
  return () => {
    text ??= readFile(path, "utf8");
    return text;
  };
}

/**
 * The console's routes, to mount at `/console`: the page, its modules, the
 * vendored UI library and the driver conformance table as JSON (public
 * facts about this build, like `/v1/openapi.json`).
 */
export function consoleRoutes(): Hono {
  const app = new Hono();
  const assets = new Map(Object.entries(ASSETS).map(([name, type]) => [name, { type, read: cachedFile(join(ASSETS_DIR, name)) }]));
  const vendor = new Map(Object.entries(VENDOR).map(([name, path]) => [name, { type: JS, read: cachedFile(path) }]));
  let conformance: string | null = null;
  // The page changes with every upgrade of the server; a stale cached module would talk to a newer API.
  const headers = (type: string) => ({ "content-type": type, "cache-control": "no-cache" });

  app.get("/", async (c) => c.body(await (assets.get("index.html")?.read() ?? ""), 200, headers(ASSETS["index.html"] ?? "")));
  app.get("/conformance.json", (c) => {
    conformance ??= JSON.stringify({ data: conformanceRows() });
    return c.body(conformance, 200, headers("application/json"));
  });
  app.get("/vendor/:name", async (c) => {
    const file = vendor.get(c.req.param("name"));
    return file ? c.body(await file.read(), 200, headers(file.type)) : c.notFound();
  });
  app.get("/:name", async (c) => {
    const file = assets.get(c.req.param("name"));
    return file ? c.body(await file.read(), 200, headers(file.type)) : c.notFound();
  });
  return app;
}

/** Mounts the console on the server's app at `/console`; the root URL and `/console/` lead there. */
export function mountConsole<E extends Env>(app: Hono<E>): void {
  app.route("/console", consoleRoutes());
  app.get("/console/", (c) => c.redirect("/console"));
  app.get("/", (c) => c.redirect("/console"));
}
