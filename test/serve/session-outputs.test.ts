/**
 * A session's outputs as session-scoped Files, through the official SDK, on
 * both storage backends (ADR 0023): the agent's bash (a real bubblewrap
 * sandbox, scripted model) writes deliverables into /mnt/session/outputs next
 * to hostile entries (symlinks to host files and to `/`, a FIFO, a file over
 * the size cap); once the turn ends `files.list({ scope_id })` lists exactly
 * the regular files, by their path in the outputs directory, and
 * `files.download` streams their bytes. A second turn that rewrites one file
 * and deletes another replaces the first's row and drops the second's.
 * The same server's workspace browser extension (docs/api.md) lists and serves
 * workspace files and refuses traversal and symlinks with the API's error shape.
 */
import type { Dialect } from "@openma/storage";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { agentAndEnvironment, startBrainServer } from "../cli/support.ts";
import type { TestServer } from "../support/server.ts";
import { until } from "../support/until.ts";

const CAP = 64 * 1024;
const FIRST = [
  "cd /mnt/session/outputs",
  "mkdir -p data && printf 'a,b\\n1,2\\n' > data/numbers.csv && printf '# Report\\n' > report.md",
  "ln -s /etc/passwd passwd && ln -s / escape && mkfifo pipe",
  `head -c ${CAP + 1} /dev/zero > big.bin`,
  "printf 'workspace notes' > /workspace/notes.txt && ln -s /etc /workspace/etc-link && echo first-done",
].join(" && ");
const SECOND = "cd /mnt/session/outputs && printf '# Report v2\\n' > report.md && rm data/numbers.csv && echo second-done";

describe.each<Dialect>(["sqlite", "postgres"])("session outputs as files (%s)", (dialect) => {
  let server: Awaited<ReturnType<typeof startBrainServer>>;
  let t: TestServer;

  beforeAll(async () => {
    server = await startBrainServer(
      [
        {
          match: { last_user_text_contains: "first" },
          response: { content: [{ type: "tool_use", name: "bash", input: { command: FIRST } }] },
        },
        { match: { tool_result_for: "bash", tool_result_contains: "first-done" }, response: "Wrote the outputs." },
        {
          match: { last_user_text_contains: "second" },
          response: { content: [{ type: "tool_use", name: "bash", input: { command: SECOND } }] },
        },
        { match: { tool_result_for: "bash", tool_result_contains: "second-done" }, response: "Rewrote the report." },
      ],
      undefined,
      { dialect, env: { OPENMA_FILE_UPLOAD_LIMIT_BYTES: String(CAP) } },
    );
    t = server.t;
  });
  afterAll(async () => server?.close());

  const outputs = async (sessionId: string) => {
    const page = await t.client.beta.files.list({ scope_id: sessionId });
    return page.data
      .map((f) => ({ id: f.id, filename: f.filename, size: f.size_bytes, scope: f.scope }))
      .sort((a, b) => a.filename.localeCompare(b.filename));
  };
  const text = async (id: string) => (await t.client.beta.files.download(id)).text();
  const say = (sessionId: string, words: string) =>
    t.client.beta.sessions.events.send(sessionId, { events: [{ type: "user.message", content: [{ type: "text", text: words }] }] });
  const workspace = (sessionId: string, route: string, path: string) =>
    fetch(`${t.baseURL}/v1/sessions/${sessionId}/${route}?path=${encodeURIComponent(path)}`, { headers: { "x-api-key": t.apiKey } });

  it("lists the regular output files after the turn, downloads them, and follows later turns", async () => {
    const { agentId, environmentId } = await agentAndEnvironment(t, "always_allow");
    const session = await t.client.beta.sessions.create({ agent: agentId, environment_id: environmentId });
    await say(session.id, "first");
    // Rows commit one file at a time: wait for the whole collection (anything more, e.g. a followed link, times out below).
    await until(async () => (await outputs(session.id)).length >= 2, "the first turn's outputs");
    const first = await outputs(session.id);
    // Symlinks, the FIFO and the file over the cap are left out; the rest are listed by their path.
    expect(first.map((f) => f.filename)).toEqual(["data/numbers.csv", "report.md"]);
    expect(first.every((f) => f.scope?.type === "session" && f.scope.id === session.id)).toBe(true);
    const report = first.find((f) => f.filename === "report.md")!;
    expect(await text(report.id)).toBe("# Report\n");
    expect(await text(first.find((f) => f.filename === "data/numbers.csv")!.id)).toBe("a,b\n1,2\n");
    expect(report.size).toBe(9);

    await say(session.id, "second");
    await until(async () => (await outputs(session.id)).length === 1, "the second turn's outputs");
    const [rewritten] = await outputs(session.id);
    expect(rewritten?.filename).toBe("report.md");
    expect(rewritten?.id).not.toBe(report.id);
    expect(await text(rewritten!.id)).toBe("# Report v2\n");
    // Files are immutable: the replaced version is gone, not changed in place.
    await expect(t.client.beta.files.retrieveMetadata(report.id)).rejects.toMatchObject({ status: 404 });

    // Archiving collects once more: nothing changed, so the same row stays.
    await t.client.beta.sessions.archive(session.id);
    expect((await outputs(session.id)).map((f) => f.id)).toEqual([rewritten!.id]);

    // The workspace browser (an OpenMA extension).
    const root = await workspace(session.id, "workspace", "");
    expect(root.status).toBe(200);
    const listing = (await root.json()) as { entries: Array<{ name: string; type: string; size_bytes: number }> };
    expect(listing.entries).toEqual(
      expect.arrayContaining([
        expect.objectContaining({ name: "notes.txt", type: "file", size_bytes: 15 }),
        expect.objectContaining({ name: "etc-link", type: "symlink" }),
      ]),
    );
    const content = await workspace(session.id, "workspace/content", "notes.txt");
    expect(content.status).toBe(200);
    expect(await content.text()).toBe("workspace notes");
    for (const [route, path, code] of [
      ["workspace", "../../..", "path_traversal"],
      ["workspace/content", "../outputs/x", "path_traversal"],
      ["workspace", "etc-link", "path_refused"],
      ["workspace/content", "etc-link/passwd", "path_refused"],
    ] as const) {
      const res = await workspace(session.id, route, path);
      expect(res.status, `${route} ${path}`).toBe(400);
      expect(await res.json()).toMatchObject({ type: "error", error: { type: "invalid_request_error", details: { error_code: code } } });
    }
    expect((await workspace(session.id, "workspace/content", "missing.txt")).status).toBe(404);
  });
});
