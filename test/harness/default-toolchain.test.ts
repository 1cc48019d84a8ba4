/**
 * What a coding agent can do in a default session (issue 12): `openma
 * serve`'s default cloud environment on each local driver, the agent's
 * `bash` (scripted model) clones nothing from outside but does everything a
 * clone-fetch-install cycle needs: a git repository with a commit, a curl
 * fetch of an HTTP server on this host's non-loopback address (through the
 * sandbox's egress gateway, as every request leaves), `python3 -m pip`, a venv,
 * and npm. On Docker these come from the base image
 * (scripts/build-images.sh), on bubblewrap from the host's read-only /usr.
 * Fails (never skips) when the driver is missing.
 */
import http from "node:http";
import type { AddressInfo } from "node:net";
import { hostIpv4 } from "@openma/egress/testing";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { hostProbes } from "../../apps/openma/src/sandbox.ts";
import { type LocalSandboxServer, resultText, startLocalSandboxServer, toolTurnScript } from "./local-sandbox-support.ts";

const MARK = "fetched-through-the-gateway";

const command = (url: string) =>
  [
    "set -e",
    "cd /tmp && rm -rf toolchain && mkdir toolchain && cd toolchain",
    "git init -q repo && cd repo && echo hi > a.txt && git add a.txt",
    "git -c user.email=agent@example.invalid -c user.name=agent commit -q -m first",
    'echo "git commits: $(git rev-list --count HEAD)"',
    `echo "curl: $(curl -fsS ${url})"`,
    'echo "pip: $(python3 -m pip --version | cut -d" " -f1)"',
    'python3 -m venv --without-pip /tmp/toolchain/venv && echo "venv: $(/tmp/toolchain/venv/bin/python -c "import sys; print(sys.prefix != sys.base_prefix)")"',
    'echo "npm: $(npm --version)"',
  ].join("\n");

describe.each(["bubblewrap", "docker"] as const)("a default session's toolchain on %s", (driver) => {
  let upstream: http.Server;
  let server: LocalSandboxServer;

  beforeAll(async () => {
    const probe = await hostProbes[driver]();
    if (!probe.ok) throw new Error(`${driver} is required for this test: ${probe.reason}`);
    upstream = http.createServer((_req, res) => res.end(MARK));
    const ip = hostIpv4();
    await new Promise<void>((resolve) => upstream.listen(0, ip, resolve));
    const url = `http://${ip}:${(upstream.address() as AddressInfo).port}/`;
    server = await startLocalSandboxServer("sqlite", driver, toolTurnScript(command(url), "done\n"));
  }, 120_000);
  afterAll(async () => {
    await server?.close();
    upstream?.closeAllConnections();
    await new Promise((resolve) => upstream?.close(resolve));
  });

  it("has git, curl, python3 -m pip, venv and npm", async () => {
    const sessionId = await server.createToolsetSession("toolchain");
    const events = await server.sendUntilIdle(sessionId, "use the sandbox");
    const result = events.find((e) => e.type === "agent.tool_result");
    const text = resultText(result);
    expect(result?.is_error ?? false, text).toBe(false);
    expect(text).toContain("git commits: 1");
    expect(text).toContain(`curl: ${MARK}`);
    expect(text).toMatch(/^pip: pip$/m);
    expect(text).toMatch(/^venv: True$/m);
    expect(text).toMatch(/^npm: \d+\.\d+\.\d+$/m);
  }, 180_000);
});
