/**
 * `openma serve`'s embedded default sandbox on Docker, end to end on both
 * storage backends: the brain runs the default harness against the scripted
 * model, which asks for `bash`, `write` and `read`; the tools run in the
 * session's container (found by its ownership labels while the session is
 * live: its id is the hostname the command printed, its init is pid 1), the
 * written file lands in the session's host workspace, and archiving the
 * session removes the container before the archive call returns. Completion
 * is observed on the SSE stream, never by waiting on time. Fails (never
 * skips) when dockerd or the base image is missing.
 */
import { readFile } from "node:fs/promises";
import { hostname } from "node:os";
import { join } from "node:path";
import { connectDocker, imagePresent, LABELS, NODE_DOCKER_PROVIDER, readImageManifest } from "@openma/driver-node-docker";
import { BACKENDS } from "@openma/storage/testing";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type LocalSandboxServer, resultText, startLocalSandboxServer, toolTurnScript } from "./local-sandbox-support.ts";

const SCRIPT = toolTurnScript("hostname; cat /proc/1/comm; node --version; ls /workspace", "written in the container\n");

const docker = connectDocker();

/** Containers of this session made by the node-docker driver, running or not. */
const sessionContainers = (sessionId: string) =>
  docker.listContainers({
    all: true,
    filters: { label: [`${LABELS.managed}=true`, `${LABELS.driver}=${NODE_DOCKER_PROVIDER}`, `${LABELS.session}=${sessionId}`] },
  });

describe.each(BACKENDS)("openma serve's local Docker sandbox on %s", (dialect) => {
  let server: LocalSandboxServer;
  const sessions: string[] = [];

  beforeAll(async () => {
    // The server would start anyway and fail closed; this test must fail loudly instead, naming the fix.
    const manifest = await readImageManifest();
    if (!manifest.ok) throw new Error(manifest.message);
    if (!(await imagePresent(docker, manifest.manifest.base.image))) {
      throw new Error(`the base image ${manifest.manifest.base.image} is not loaded in dockerd: run \`npm run provision\``);
    }
    server = await startLocalSandboxServer(dialect, "docker", SCRIPT);
  });
  afterAll(async () => {
    await server?.close();
    // The safety net when an assertion failed before the archive: the test itself asserts the removal.
    for (const sessionId of sessions) {
      for (const c of await sessionContainers(sessionId)) {
        await docker
          .getContainer(c.Id)
          .remove({ force: true, v: true })
          .catch(() => {});
      }
    }
  });

  it("runs bash, write and read in the session's container over its host workspace, and archive removes the container", async () => {
    const { t } = server;
    const sessionId = await server.createToolsetSession("containerized");
    sessions.push(sessionId);
    const events = await server.sendUntilIdle(sessionId, "use the sandbox");

    expect(events.filter((e) => e.type === "session.error")).toEqual([]);
    const results = events.filter((e) => e.type === "agent.tool_result");
    expect(results.map((r) => r.is_error)).toEqual([false, false, false]);

    // While the session lives, exactly one container carries its labels, and the command ran in it:
    // Docker names a container's host after its id, and its pid 1 is Docker's init.
    const live = await sessionContainers(sessionId);
    expect(live.map((c) => c.State)).toEqual(["running"]);
    const [host, init, node] = resultText(results[0]).trim().split("\n");
    // The base image carries the Node the server runs on (build-images.sh copies it in).
    expect(node).toBe(process.version);
    expect(host).toBe(live[0]?.Id.slice(0, 12));
    expect(host).not.toBe(hostname());
    expect(init).toBe("docker-init");

    expect(resultText(results[2])).toContain("written in the container");
    expect(await readFile(join(t.store.dataDir, "workspaces", sessionId, "notes.txt"), "utf8")).toBe("written in the container\n");

    // Archive returns once the sandbox is gone; its files stay on the host.
    await t.client.beta.sessions.archive(sessionId);
    expect(await sessionContainers(sessionId)).toEqual([]);
    expect(await readFile(join(t.store.dataDir, "workspaces", sessionId, "notes.txt"), "utf8")).toBe("written in the container\n");
  });
});
