/**
 * Exec through the Engine API on a real dockerd (busybox image): exit
 * codes, demultiplexed streams, duplex stdin, timeouts, aborts, killing the
 * whole process tree, and secrets that never show in `docker inspect` or any
 * process's argv.
 */
import { createHash, randomBytes } from "node:crypto";
import type { ExecResult, ManagedSandboxLease } from "@openma/contract";
import { afterAll, beforeEach, describe, expect, it } from "vitest";
import type { NodeDockerSandbox } from "./driver.ts";
import { SECRET_DIR } from "./scripts.ts";
import {
  type DockerTestEnv,
  type HostBindings,
  hostBindings,
  never,
  once,
  removeHostBindings,
  removeRunContainers,
  requireDocker,
  testFence,
  testScope,
} from "./testing.ts";
import type { DockerToolSandbox } from "./tool-sandbox.ts";

const text = (bytes: Uint8Array) => Buffer.from(bytes).toString("utf8");

function exited(result: ExecResult): Extract<ExecResult, { type: "exited" }> {
  if (result.type !== "exited") throw new Error(`expected an exit, got ${JSON.stringify(result.type === "error" ? result : result.type)}`);
  return result;
}

let env: DockerTestEnv;
let driver: NodeDockerSandbox;
let lease: ManagedSandboxLease;
let bindings: HostBindings;
let port: DockerToolSandbox;
const scope = testScope();

/** Processes in the container whose argv contains `needle` (busybox ps prints full command lines). */
async function processesMatching(needle: string): Promise<string[]> {
  const ps = exited(await port.exec({ command: ["ps", "-o", "pid,args"], timeoutMs: 10_000, signal: never }));
  return text(ps.stdout)
    .split("\n")
    .filter((line) => line.includes(needle) && !line.includes("ps -o"));
}

const setup = once(async () => {
  env = await requireDocker();
  driver = env.driver();
  bindings = await hostBindings();
  const acquired = await driver.acquire({
    scope,
    fence: testFence(scope),
    workspace: bindings.workspace,
    outputs: bindings.outputs,
    idempotencyKey: "exec-suite",
    signal: never,
  });
  if (acquired.type !== "acquired") throw new Error(`acquire failed: ${acquired.reason}`);
  lease = acquired.lease;
  port = driver.toolSandbox(lease);
});

beforeEach(setup);

afterAll(async () => {
  if (lease) await driver.terminate({ scope, fence: testFence(scope), lease, reason: "completed", signal: never });
  if (env) await removeRunContainers(env);
  if (bindings) await removeHostBindings(bindings);
});

describe("node-docker exec", () => {
  it("returns the exit code and keeps stdout and stderr apart", async () => {
    const result = exited(await port.exec({ command: ["sh", "-c", "echo out; echo err >&2; exit 3"], timeoutMs: 10_000, signal: never }));
    expect(result.exitCode).toBe(3);
    expect(text(result.stdout)).toBe("out\n");
    expect(text(result.stderr)).toBe("err\n");
    expect(result.truncated).toBe(false);
  });

  it("runs in the workspace by default, honours cwd and env, and does not leak the host environment", async () => {
    const result = exited(
      await port.exec({
        // biome-ignore lint/suspicious/noTemplateCurlyInString: shell parameter expansion, not a template
        command: ["sh", "-c", 'pwd; echo "$GREETING"; echo "${DATABASE_URL:-unset}"'],
        env: { GREETING: "hello there" },
        timeoutMs: 10_000,
        signal: never,
      }),
    );
    expect(text(result.stdout)).toBe("/workspace\nhello there\nunset\n");
    const elsewhere = exited(await port.exec({ command: ["pwd"], cwd: "/tmp", timeoutMs: 10_000, signal: never }));
    expect(text(elsewhere.stdout)).toBe("/tmp\n");
  });

  it("pipes stdin (binary, larger than a socket buffer) and closes it", async () => {
    const payload = randomBytes(3 * 1024 * 1024 + 7);
    const result = exited(
      await port.exec({ command: ["cat"], stdin: payload, timeoutMs: 30_000, signal: never, maxOutputBytes: 4 * 1024 * 1024 }),
    );
    expect(result.exitCode).toBe(0);
    expect(Buffer.from(result.stdout).equals(payload)).toBe(true);
    const empty = exited(await port.exec({ command: ["wc", "-c"], timeoutMs: 10_000, signal: never }));
    expect(text(empty.stdout).trim()).toBe("0");
  });

  it("streams both ways: output arrives while the process waits for more input", async () => {
    let replied = false;
    let proc: Awaited<ReturnType<DockerToolSandbox["spawn"]>> | undefined;
    const seen: string[] = [];
    proc = await port.spawn({
      command: ["sh", "-c", 'echo ready; read line; echo "got $line" >&2; read again; echo "then $again"'],
      signal: never,
      onOutput: (stream, chunk) => {
        seen.push(`${stream}:${text(chunk)}`);
        // Only answer once the process has proven it is running and waiting.
        if (!replied && text(chunk).includes("ready")) {
          replied = true;
          void proc?.write("ping\n").then(() => proc?.write("pong\n"));
        }
      },
    });
    const result = exited(await proc.done);
    expect(result.exitCode).toBe(0);
    expect(text(result.stdout)).toBe("ready\nthen pong\n");
    expect(text(result.stderr)).toBe("got ping\n");
    expect(seen[0]).toBe("stdout:ready\n");
  });

  it("keeps only the last maxOutputBytes and says so", async () => {
    const result = exited(await port.exec({ command: ["sh", "-c", "seq 1 20000"], timeoutMs: 10_000, signal: never, maxOutputBytes: 100 }));
    expect(result.truncated).toBe(true);
    expect(result.stdout.length).toBe(100);
    expect(text(result.stdout).endsWith("19999\n20000\n")).toBe(true);
  });

  it("reports a missing command or directory as an error, not an exit", async () => {
    const missing = await port.exec({ command: ["no-such-binary-here"], timeoutMs: 10_000, signal: never });
    expect(missing).toEqual({ type: "error", message: "command not found: no-such-binary-here" });
    const badCwd = await port.exec({ command: ["true"], cwd: "/does/not/exist", timeoutMs: 10_000, signal: never });
    expect(badCwd.type).toBe("error");
    expect(await port.exec({ command: [], timeoutMs: 10_000, signal: never })).toMatchObject({ type: "error" });
  });

  it("times out, killing the command and everything it started", async () => {
    const marker = `sleep 7${randomBytes(2).readUInt16BE(0)}`;
    const result = await port.exec({
      command: ["sh", "-c", `${marker} & ${marker} & echo started; wait`],
      // Long enough for "started" to arrive even on a loaded machine; the test never waits on it otherwise.
      timeoutMs: 1500,
      signal: never,
    });
    expect(result.type).toBe("timeout");
    if (result.type === "timeout") expect(text(result.stdout)).toBe("started\n");
    expect(await processesMatching(marker)).toEqual([]);
  });

  it("aborts on the signal, killing the tree, and refuses to start when already aborted", async () => {
    const marker = `sleep 8${randomBytes(2).readUInt16BE(0)}`;
    const controller = new AbortController();
    const result = await port.exec({
      command: ["sh", "-c", `${marker} & echo started; wait`],
      timeoutMs: 60_000,
      signal: controller.signal,
      onOutput: (_stream, chunk) => {
        if (text(chunk).includes("started")) controller.abort();
      },
    });
    expect(result.type).toBe("aborted");
    expect(await processesMatching(marker)).toEqual([]);
    const again = await port.exec({ command: ["true"], timeoutMs: 10_000, signal: controller.signal });
    expect(again.type).toBe("aborted");
  });

  it("terminates background jobs left behind when the command exits", async () => {
    const marker = `sleep 9${randomBytes(2).readUInt16BE(0)}`;
    const result = exited(await port.exec({ command: ["sh", "-c", `${marker} & echo done`], timeoutMs: 30_000, signal: never }));
    expect(text(result.stdout)).toBe("done\n");
    expect(await processesMatching(marker)).toEqual([]);
  });

  it("runs concurrent commands independently", async () => {
    const results = await Promise.all(
      [1, 2, 3, 4].map((n) => port.exec({ command: ["sh", "-c", `echo ${n}; exit ${n}`], timeoutMs: 10_000, signal: never })),
    );
    expect(results.map((r) => [exited(r).exitCode, text(exited(r).stdout)])).toEqual([
      [1, "1\n"],
      [2, "2\n"],
      [3, "3\n"],
      [4, "4\n"],
    ]);
  });

  it("delivers secrets without putting them in docker inspect or any argv", async () => {
    // Quotes, $, newlines and backslashes must survive the env file byte for byte.
    const secret = `sk-${randomBytes(12).toString("hex")}'"$HOME\\\n tail`;
    const digest = createHash("sha256").update(secret).digest("hex");
    let ready!: () => void;
    const isReady = new Promise<void>((resolve) => {
      ready = resolve;
    });
    const proc = await port.spawn({
      command: ["sh", "-c", 'printf %s "$OPENMA_TEST_SECRET" | sha256sum; echo ready; read line'],
      secretEnv: { OPENMA_TEST_SECRET: secret },
      signal: never,
      onOutput: (_stream, chunk) => {
        if (text(chunk).includes("ready")) ready();
      },
    });
    await isReady;

    // While the process runs: the container, every exec and every process's argv are clean.
    const container = env.docker.getContainer(lease.runtimeId);
    const info = await container.inspect();
    expect(JSON.stringify(info)).not.toContain(secret.slice(0, 20));
    for (const execId of info.ExecIDs ?? []) {
      const exec = await env.docker
        .getExec(execId)
        .inspect()
        .catch(() => null);
      expect(JSON.stringify(exec)).not.toContain(secret.slice(0, 20));
    }
    const cmdlines = exited(
      await port.exec({ command: ["sh", "-c", "cat /proc/[0-9]*/cmdline | tr '\\0' ' '"], timeoutMs: 10_000, signal: never }),
    );
    expect(text(cmdlines.stdout)).toContain("OPENMA_TEST_SECRET");
    expect(text(cmdlines.stdout)).not.toContain(secret.slice(0, 20));
    // The delivery file was sourced and deleted before the command started.
    const leftovers = exited(await port.exec({ command: ["ls", "-A", SECRET_DIR], timeoutMs: 10_000, signal: never }));
    expect(text(leftovers.stdout)).toBe("");

    await proc.write("\n");
    const result = exited(await proc.done);
    expect(text(result.stdout)).toBe(`${digest}  -\nready\n`);
  });
});
