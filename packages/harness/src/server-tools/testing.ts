/**
 * Test servers for the server-tool tests: a real MCP server built with
 * `@modelcontextprotocol/sdk` (McpServer + StreamableHTTPServerTransport on a
 * local port, plus an OAuth token endpoint) and a plain HTTP server for
 * web_fetch. Both record what they receive so tests can check exactly which
 * credentials reached them.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import type { AuthInfo } from "@modelcontextprotocol/sdk/server/auth/types.js";
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { StreamableHTTPServerTransport } from "@modelcontextprotocol/sdk/server/streamableHttp.js";
import { z } from "zod";
import type { ServerToolContext } from "../server-tools.ts";

function listen(server: Server): Promise<number> {
  return new Promise((resolve, reject) => {
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => resolve((server.address() as AddressInfo).port));
  });
}

function shutdown(server: Server): Promise<void> {
  server.closeAllConnections();
  return new Promise((resolve) => server.close(() => resolve()));
}

/** A port nothing listens on (bound, then released). */
export async function closedPort(): Promise<number> {
  const server = createServer();
  const port = await listen(server);
  await shutdown(server);
  return port;
}

export interface McpTestServer {
  url: string;
  tokenEndpoint: string;
  /** Authorization header of every MCP request (null when absent). */
  authorizations: Array<string | null>;
  /** Form bodies posted to the token endpoint. */
  tokenRequests: URLSearchParams[];
  /** Resolves when the `hang` tool has started. */
  hangStarted: Promise<void>;
  close(): Promise<void>;
}

export interface McpTestServerOptions {
  /** The one bearer token the server accepts. */
  validToken: string;
  /** The refresh token the token endpoint exchanges for `validToken`. */
  refreshToken?: string;
}

function buildMcpServer(onHang: () => void, releasers: Array<() => void>): McpServer {
  const server = new McpServer({ name: "openma-test-mcp", version: "1.0.0" });
  server.registerTool("echo", { description: "Echoes the text back", inputSchema: { text: z.string() } }, async ({ text }) => ({
    content: [
      { type: "text", text: `echo: ${text}` },
      { type: "image", data: "aGVsbG8gd29ybGQ=", mimeType: "image/png" },
    ],
  }));
  server.registerTool("private_note", { description: "Reads a private note; needs a bearer token" }, async (extra) => {
    if (!extra.authInfo) return { content: [{ type: "text", text: "unauthorized: a bearer token is required" }], isError: true };
    // Echoes the token on purpose: the executor must redact it before the model or the event log sees it.
    return { content: [{ type: "text", text: `private note for ${extra.authInfo.clientId}, token ${extra.authInfo.token}` }] };
  });
  server.registerTool("hang", { description: "Never finishes on its own" }, async () => {
    onHang();
    await new Promise<void>((resolve) => releasers.push(resolve));
    return { content: [{ type: "text", text: "released" }] };
  });
  return server;
}

async function readBody(req: IncomingMessage): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const chunk of req) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks).toString("utf8");
}

export async function startMcpTestServer(options: McpTestServerOptions): Promise<McpTestServer> {
  const authorizations: Array<string | null> = [];
  const tokenRequests: URLSearchParams[] = [];
  const releasers: Array<() => void> = [];
  let markHang: () => void = () => undefined;
  const hangStarted = new Promise<void>((resolve) => {
    markHang = resolve;
  });

  const token = async (req: IncomingMessage, res: ServerResponse) => {
    const form = new URLSearchParams(await readBody(req));
    tokenRequests.push(form);
    if (form.get("grant_type") !== "refresh_token" || !options.refreshToken || form.get("refresh_token") !== options.refreshToken) {
      res.writeHead(400, { "content-type": "application/json" }).end(JSON.stringify({ error: "invalid_grant" }));
      return;
    }
    const body = {
      access_token: options.validToken,
      token_type: "Bearer",
      expires_in: 3600,
      refresh_token: `${options.refreshToken}-next`,
    };
    res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify(body));
  };

  const mcp = async (req: IncomingMessage & { auth?: AuthInfo }, res: ServerResponse) => {
    const auth = req.headers.authorization ?? null;
    authorizations.push(auth);
    if (auth !== null && auth !== `Bearer ${options.validToken}`) {
      // Deliberately echoes what it got: the client must never pass this text on.
      res
        .writeHead(401, { "content-type": "text/plain", "www-authenticate": 'Bearer error="invalid_token"' })
        .end(`invalid token: ${auth}`);
      return;
    }
    if (req.method !== "POST") {
      res.writeHead(405, { allow: "POST" }).end();
      return;
    }
    if (auth !== null) req.auth = { token: options.validToken, clientId: "test-client", scopes: [] };
    // Stateless mode: a fresh server and transport per request.
    const server = buildMcpServer(markHang, releasers);
    const transport = new StreamableHTTPServerTransport({ sessionIdGenerator: undefined, enableJsonResponse: true });
    res.on("close", () => {
      void transport.close();
      void server.close();
    });
    await server.connect(transport);
    await transport.handleRequest(req, res);
  };

  const http = createServer((req, res) => {
    const path = new URL(req.url ?? "/", "http://x").pathname;
    const handler = path === "/token" ? token : path === "/mcp" ? mcp : null;
    if (!handler) {
      res.writeHead(404).end();
      return;
    }
    handler(req, res).catch(() => {
      if (!res.headersSent) res.writeHead(500).end();
    });
  });
  const port = await listen(http);
  return {
    url: `http://127.0.0.1:${port}/mcp`,
    tokenEndpoint: `http://127.0.0.1:${port}/token`,
    authorizations,
    tokenRequests,
    hangStarted,
    async close() {
      for (const release of releasers) release();
      await shutdown(http);
    },
  };
}

export interface WebTestServer {
  port: number;
  /** Every request: its Host header, path and headers. */
  requests: Array<{ host: string; path: string; headers: IncomingMessage["headers"] }>;
  /** Resolves once `count` requests for `path` have arrived in total. */
  waitForRequests(path: string, count: number): Promise<void>;
  close(): Promise<void>;
}

/**
 * Routes: `/page` (HTML), `/text`, `/json`, `/headers` (echoes request
 * headers as JSON), `/big` (200 000 bytes), `/redirect?to=<url>` (302),
 * `/loop` (redirects to itself), `/binary`, `/missing` (404), `/hang` (never answers).
 */
export async function startWebTestServer(): Promise<WebTestServer> {
  const requests: WebTestServer["requests"] = [];
  const waiters: Array<{ path: string; count: number; resolve: () => void }> = [];
  const seen = (path: string) => requests.filter((r) => r.path === path).length;
  const http = createServer((req, res) => {
    const url = new URL(req.url ?? "/", "http://x");
    requests.push({ host: req.headers.host ?? "", path: url.pathname, headers: req.headers });
    for (const w of waiters.filter((w) => w.path === url.pathname && seen(w.path) >= w.count)) w.resolve();
    switch (url.pathname) {
      case "/page":
        res.writeHead(200, { "content-type": "text/html; charset=utf-8" });
        res.end(
          "<!doctype html><html><head><title>Test &amp; Page</title><style>body{color:red}</style></head>" +
            "<body><h1>Hello</h1><script>var secret = 1;</script><p>First&nbsp;para &lt;ok&gt;</p>" +
            '<ul><li>one</li><li>two</li></ul><p>See <a href="https://example.com/docs">the docs</a>.</p></body></html>',
        );
        return;
      case "/text":
        res.writeHead(200, { "content-type": "text/plain" }).end("plain text body");
        return;
      case "/json":
        res.writeHead(200, { "content-type": "application/json" }).end('{"ok":true}');
        return;
      case "/headers":
        res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify(req.headers));
        return;
      case "/big":
        res.writeHead(200, { "content-type": "text/plain" }).end("x".repeat(200_000));
        return;
      case "/redirect":
        res.writeHead(302, { location: url.searchParams.get("to") ?? "/page" }).end();
        return;
      case "/loop":
        res.writeHead(302, { location: "/loop" }).end();
        return;
      case "/binary":
        res.writeHead(200, { "content-type": "application/octet-stream" }).end(Buffer.from([0, 1, 2, 3]));
        return;
      case "/hang":
        return; // never answers
      default:
        res.writeHead(404, { "content-type": "text/plain" }).end("not found");
    }
  });
  const port = await listen(http);
  const waitForRequests = (path: string, count: number) =>
    seen(path) >= count ? Promise.resolve() : new Promise<void>((resolve) => waiters.push({ path, count, resolve }));
  return { port, requests, waitForRequests, close: () => shutdown(http) };
}

/** A ServerToolContext for tests (the loop builds the real one from the session row). */
export function toolContext(
  deps: Pick<ServerToolContext, "storage" | "secrets">,
  agent: unknown,
  options: { environment?: unknown; vaultIds?: string[]; sessionId?: string } = {},
): ServerToolContext {
  return {
    sessionId: options.sessionId ?? "sesn_test",
    agent,
    environment: options.environment ?? { type: "environment", config: { type: "cloud", networking: { type: "unrestricted" } } },
    vaultIds: options.vaultIds ?? [],
    storage: deps.storage,
    secrets: deps.secrets,
  };
}
