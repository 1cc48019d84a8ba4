/**
 * `openma serve`'s embedded default sandbox, end to end on both backends: the
 * brain runs the default harness against the scripted model, which asks for
 * `bash`, `write` and `read`; the tools run in the session's bubblewrap
 * sandbox (its own pid namespace and hostname), and the written file lands
 * in the session's host workspace under the data dir. Archiving the session
 * kills its sandbox before the archive call returns: no host process bound to
 * its workspace is left. Completion is observed on the SSE stream, never by
 * waiting on time. Fails (never skips) when bubblewrap is not usable here.
 */
import { readFile } from "node:fs/promises";
import { hostname } from "node:os";
import { join } from "node:path";
import { hostProcesses } from "@openma/driver-suite";
import { BACKENDS } from "@openma/storage/testing";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type LocalSandboxServer, resultText, startLocalSandboxServer, toolTurnScript } from "./local-sandbox-support.ts";

const SCRIPT = toolTurnScript("echo $$; hostname; node --version; ls /workspace", "written in the sandbox\n");

describe.each(BACKENDS)("openma serve's local sandbox on %s", (dialect) => {
  let server: LocalSandboxServer;

  beforeAll(async () => {
    server = await startLocalSandboxServer(dialect, "bubblewrap", SCRIPT);
  });
  afterAll(async () => {
    await server?.close();
  });

  it("runs bash, write and read inside the session's bubblewrap sandbox over its host workspace, and archive kills the sandbox", async () => {
    const { t } = server;
    const sessionId = await server.createToolsetSession("sandboxed");
    const events = await server.sendUntilIdle(sessionId, "use the sandbox");

    expect(events.filter((e) => e.type === "session.error")).toEqual([]);
    const results = events.filter((e) => e.type === "agent.tool_result");
    expect(results.map((r) => r.is_error)).toEqual([false, false, false]);
    const [pid, host, node] = resultText(results[0]).trim().split("\n");
    // `node` in the sandbox is the server's own Node 24, not the host's /usr/bin/node.
    expect(node).toBe(process.version);
    // A fresh pid namespace numbers from 1; the host's pids are far above; the sandbox has its own hostname.
    expect(Number(pid)).toBeGreaterThan(0);
    expect(Number(pid)).toBeLessThan(20);
    expect(host).toBe("sandbox");
    expect(host).not.toBe(hostname());
    expect(resultText(results[2])).toContain("written in the sandbox");
    const workspace = join(t.store.dataDir, "workspaces", sessionId);
    expect(await readFile(join(workspace, "notes.txt"), "utf8")).toBe("written in the sandbox\n");

    // The sandbox outlives the turn (until idle): its bwrap processes bind the session's workspace.
    const sandboxProcesses = async () => (await hostProcesses()).filter((p) => p.argv.includes(workspace)).map((p) => p.argv);
    expect((await sandboxProcesses()).length).toBeGreaterThan(0);
    // Archive returns once the sandbox is gone; its files stay on the host.
    await t.client.beta.sessions.archive(sessionId);
    expect(await sandboxProcesses()).toEqual([]);
    expect(await readFile(join(workspace, "notes.txt"), "utf8")).toBe("written in the sandbox\n");
  });
});
