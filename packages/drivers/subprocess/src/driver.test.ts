/** The subprocess driver with real child processes and a real temp directory. */
import { existsSync, mkdirSync, readFileSync, symlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import type { ToolSandboxPort } from "@openma/contract";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { SUBPROCESS_DRIVER_REFUSAL, SubprocessSandboxDriver } from "./index.ts";

const never = () => new AbortController().signal;
const text = (bytes: Uint8Array) => Buffer.from(bytes).toString("utf8");
const bash = (script: string) => ["/bin/bash", "-c", script];

/** Running (a killed orphan may linger as a zombie until something reaps it; that counts as dead). */
function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
  } catch {
    return false;
  }
  const stat = existsSync(`/proc/${pid}/stat`) ? readFileSync(`/proc/${pid}/stat`, "utf8") : "";
  return !/^\d+ \(.*\) Z/.test(stat);
}

let driver: SubprocessSandboxDriver;
let port: ToolSandboxPort;

beforeEach(async () => {
  driver = new SubprocessSandboxDriver();
  const resolved = await driver.resolve({ sessionId: "sesn_test", environmentId: "env_1", environment: null, signal: never() });
  if (resolved.type !== "ready") throw new Error("expected a sandbox");
  port = resolved.port;
});
afterEach(async () => driver.close());

describe("construction", () => {
  it("refuses to load outside NODE_ENV=test", () => {
    const saved = process.env.NODE_ENV;
    try {
      process.env.NODE_ENV = "production";
      expect(() => new SubprocessSandboxDriver()).toThrow(SUBPROCESS_DRIVER_REFUSAL);
      delete process.env.NODE_ENV;
      expect(() => new SubprocessSandboxDriver()).toThrow(/NODE_ENV=test/);
    } finally {
      process.env.NODE_ENV = saved;
    }
  });

  it("gives each session its own directory, found again by a restarted driver on the same root", async () => {
    const other = driver.portFor("sesn_other");
    expect(other.workdir).not.toBe(port.workdir);
    expect(port.workdir.startsWith(driver.rootDir)).toBe(true);
    await port.writeFile({ path: "kept.txt", content: Buffer.from("x"), signal: never() });
    const again = new SubprocessSandboxDriver({ rootDir: driver.rootDir });
    expect(again.portFor("sesn_test").workdir).toBe(port.workdir);
    expect(existsSync(join(again.portFor("sesn_test").workdir, "kept.txt"))).toBe(true);
  });
});

describe("exec", () => {
  it("runs in the workdir and reports stdout, stderr and the exit code", async () => {
    const r = await port.exec({ command: bash("pwd; echo err >&2; exit 3"), timeoutMs: 10_000, signal: never() });
    expect(r).toMatchObject({ type: "exited", exitCode: 3, signal: null, truncated: false });
    if (r.type !== "exited") return;
    expect(text(r.stdout).trim()).toBe(port.workdir);
    expect(text(r.stderr)).toBe("err\n");
  });

  it("feeds stdin and streams output as it arrives", async () => {
    const chunks: string[] = [];
    const r = await port.exec({
      command: ["cat"],
      stdin: "piped input",
      timeoutMs: 10_000,
      signal: never(),
      onOutput: (stream, chunk) => chunks.push(`${stream}:${text(chunk)}`),
    });
    expect(r).toMatchObject({ type: "exited", exitCode: 0 });
    expect(chunks.join("")).toBe("stdout:piped input");
  });

  it("never hands the host environment (model keys) to the process", async () => {
    process.env.OPENMA_MODEL_API_KEY = "sk-secret-should-not-leak";
    try {
      const r = await port.exec({ command: bash("env"), env: { EXTRA: "1" }, timeoutMs: 10_000, signal: never() });
      if (r.type !== "exited") throw new Error(r.type);
      const env = text(r.stdout);
      expect(env).not.toContain("sk-secret-should-not-leak");
      expect(env).toContain("EXTRA=1");
      expect(env).toContain(`HOME=${port.workdir}`);
    } finally {
      delete process.env.OPENMA_MODEL_API_KEY;
    }
  });

  it("keeps only the tail of large output", async () => {
    const r = await port.exec({
      command: bash("head -c 5000 /dev/zero | tr '\\0' a; echo END"),
      timeoutMs: 10_000,
      signal: never(),
      maxOutputBytes: 100,
    });
    if (r.type !== "exited") throw new Error(r.type);
    expect(r.truncated).toBe(true);
    expect(r.stdout.length).toBe(100);
    expect(text(r.stdout).endsWith("aaaEND\n")).toBe(true);
  });

  it("kills the whole process group on timeout", async () => {
    // Long enough for bash to record the pid even on a loaded machine; the 30 s sleep is what the timeout cuts.
    const r = await port.exec({ command: bash("sleep 30 >/dev/null 2>&1 & echo $! > bg.pid; wait"), timeoutMs: 1500, signal: never() });
    expect(r.type).toBe("timeout");
    const pid = Number(readFileSync(join(port.workdir, "bg.pid"), "utf8"));
    expect(alive(pid)).toBe(false);
  });

  it("kills the whole process group on abort", async () => {
    const ctrl = new AbortController();
    const r = await port.exec({
      command: bash("sleep 30 >/dev/null 2>&1 & echo $! > bg.pid; echo ready; wait"),
      timeoutMs: 60_000,
      signal: ctrl.signal,
      onOutput: (_s, chunk) => text(chunk).includes("ready") && ctrl.abort(),
    });
    expect(r.type).toBe("aborted");
    const pid = Number(readFileSync(join(port.workdir, "bg.pid"), "utf8"));
    expect(alive(pid)).toBe(false);
  });

  it("reports a missing binary as an error value", async () => {
    expect(await port.exec({ command: ["/nonexistent/binary"], timeoutMs: 1000, signal: never() })).toMatchObject({ type: "error" });
    expect(await port.exec({ command: [], timeoutMs: 1000, signal: never() })).toMatchObject({ type: "error" });
  });
});

describe("files", () => {
  it("writes atomically (creating parents, 0600 for new files), reads, stats and lists", async () => {
    expect(await port.writeFile({ path: "a/b/c.txt", content: Buffer.from("hello"), signal: never() })).toEqual({ type: "ok", bytes: 5 });
    expect(readFileSync(join(port.workdir, "a/b/c.txt"), "utf8")).toBe("hello");
    const read = await port.readFile({ path: join(port.workdir, "a/b/c.txt"), maxBytes: 100, signal: never() });
    expect(read.type === "ok" && text(read.content)).toBe("hello");
    expect(await port.readFile({ path: "a/b/c.txt", maxBytes: 2, signal: never() })).toEqual({ type: "too_large", size: 5 });
    expect(await port.readFile({ path: "a", maxBytes: 2, signal: never() })).toEqual({ type: "not_a_file", kind: "directory" });
    expect(await port.readFile({ path: "missing", maxBytes: 2, signal: never() })).toEqual({ type: "not_found" });
    const st = await port.stat({ path: "a/b/c.txt", signal: never() });
    expect(st).toMatchObject({ type: "found", kind: "file", size: 5, realPath: join(port.workdir, "a/b/c.txt") });
    const { statSync } = await import("node:fs");
    expect(statSync(join(port.workdir, "a/b/c.txt")).mode & 0o777).toBe(0o600);
    expect(await port.stat({ path: "nope", signal: never() })).toEqual({ type: "not_found" });

    mkdirSync(join(port.workdir, "node_modules/x"), { recursive: true });
    writeFileSync(join(port.workdir, "node_modules/x/skip.js"), "");
    const listed = await port.list({
      path: port.workdir,
      recursive: true,
      maxEntries: 100,
      skipDirNames: ["node_modules"],
      signal: never(),
    });
    if (listed.type !== "ok") throw new Error(listed.type);
    expect(listed.entries.map((e) => [e.path.slice(port.workdir.length), e.kind])).toEqual([
      ["/a", "directory"],
      ["/a/b", "directory"],
      ["/a/b/c.txt", "file"],
    ]);
    expect(await port.list({ path: port.workdir, recursive: true, maxEntries: 1, signal: never() })).toMatchObject({ truncated: true });
  });

  it("refuses file operations outside its directory, including through symlinks", async () => {
    expect(await port.readFile({ path: "/etc/passwd", maxBytes: 1e6, signal: never() })).toMatchObject({ type: "error" });
    expect(await port.readFile({ path: "../../etc/passwd", maxBytes: 1e6, signal: never() })).toMatchObject({ type: "error" });
    symlinkSync("/etc", join(port.workdir, "escape"));
    expect(await port.readFile({ path: "escape/passwd", maxBytes: 1e6, signal: never() })).toMatchObject({ type: "error" });
    expect(await port.writeFile({ path: "escape/owned", content: Buffer.from("x"), signal: never() })).toMatchObject({ type: "error" });
    expect(await port.list({ path: "escape", recursive: false, maxEntries: 10, signal: never() })).toMatchObject({ type: "error" });
    // A symlink leaf is replaced by the write, never written through.
    writeFileSync(join(driver.rootDir, "outside.txt"), "keep");
    symlinkSync(join(driver.rootDir, "outside.txt"), join(port.workdir, "link.txt"));
    expect(await port.writeFile({ path: "link.txt", content: Buffer.from("new"), signal: never() })).toMatchObject({ type: "error" });
    expect(readFileSync(join(driver.rootDir, "outside.txt"), "utf8")).toBe("keep");
  });
});
