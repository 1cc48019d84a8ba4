/**
 * ToolSandboxPort file operations on a real dockerd, on both images (busybox
 * and the Debian base image: their `stat`, `find` and `readlink` differ),
 * plus node in the base image.
 */
import { randomBytes } from "node:crypto";
import { readFile, stat } from "node:fs/promises";
import { join } from "node:path";
import type { ManagedSandboxLease } from "@openma/contract";
import { afterAll, beforeEach, describe, expect, it } from "vitest";
import type { NodeDockerSandbox } from "./driver.ts";
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
const bytes = (value: string) => new TextEncoder().encode(value);

let env: DockerTestEnv;

const requireEnv = once(async () => {
  env = await requireDocker();
});

afterAll(async () => {
  if (env) await removeRunContainers(env);
});

describe.each(["busybox", "base"] as const)("node-docker files (%s image)", (flavor) => {
  let driver: NodeDockerSandbox;
  let lease: ManagedSandboxLease;
  let bindings: HostBindings;
  let port: DockerToolSandbox;

  const setup = once(async () => {
    await requireEnv();
    driver = env.driver({ image: env.images[flavor].image });
    bindings = await hostBindings();
    const scope = testScope();
    const result = await driver.acquire({
      scope,
      fence: testFence(scope),
      workspace: bindings.workspace,
      outputs: bindings.outputs,
      idempotencyKey: `files-${flavor}`,
      signal: never,
    });
    if (result.type !== "acquired") throw new Error(`acquire failed: ${result.reason}`);
    lease = result.lease;
    port = driver.toolSandbox(lease);
  });
  beforeEach(setup);

  afterAll(async () => {
    if (lease)
      expect(
        await driver.terminate({ scope: testScope(), fence: testFence(testScope()), lease, reason: "completed", signal: never }),
      ).toEqual({ type: "terminated" });
    if (bindings) await removeHostBindings(bindings);
  });

  it("writes (creating parents, 0600 by default) and reads back binary content", async () => {
    const content = randomBytes(200_000);
    expect(await port.writeFile({ path: "deep/er/data.bin", content, signal: never })).toEqual({ type: "ok", bytes: content.length });
    const read = await port.readFile({ path: "/workspace/deep/er/data.bin", maxBytes: 1_000_000, signal: never });
    expect(read.type).toBe("ok");
    if (read.type === "ok") expect(Buffer.from(read.content).equals(content)).toBe(true);
    // It is the host directory behind /workspace.
    expect((await readFile(join(bindings.workspaceDir, "deep/er/data.bin"))).equals(content)).toBe(true);
    expect((await stat(join(bindings.workspaceDir, "deep/er/data.bin"))).mode & 0o777).toBe(0o600);
  });

  it("replaces atomically, keeping an existing file's mode, and writes an empty file", async () => {
    await port.writeFile({ path: "script.sh", content: bytes("v1"), mode: 0o755, signal: never });
    await port.writeFile({ path: "script.sh", content: bytes("version two"), signal: never });
    expect((await stat(join(bindings.workspaceDir, "script.sh"))).mode & 0o777).toBe(0o755);
    const read = await port.readFile({ path: "script.sh", maxBytes: 100, signal: never });
    expect(read.type === "ok" && text(read.content)).toBe("version two");
    expect(await port.writeFile({ path: "empty", content: new Uint8Array(), signal: never })).toEqual({ type: "ok", bytes: 0 });
    expect(await port.readFile({ path: "empty", maxBytes: 10, signal: never })).toMatchObject({ type: "ok", size: 0 });
    // No temporary files are left beside the target.
    const listed = await port.list({ path: "/workspace", recursive: false, maxEntries: 100, signal: never });
    expect(listed.type === "ok" && listed.entries.filter((e) => e.path.includes(".tmp"))).toEqual([]);
  });

  it("reports missing files, directories and oversized files as values", async () => {
    expect(await port.readFile({ path: "nope.txt", maxBytes: 10, signal: never })).toEqual({ type: "not_found" });
    await port.writeFile({ path: "dir/inner.txt", content: bytes("x"), signal: never });
    expect(await port.readFile({ path: "dir", maxBytes: 10, signal: never })).toEqual({ type: "not_a_file", kind: "directory" });
    await port.writeFile({ path: "big.txt", content: bytes("0123456789abcdef"), signal: never });
    expect(await port.readFile({ path: "big.txt", maxBytes: 8, signal: never })).toEqual({ type: "too_large", size: 16 });
    expect(await port.writeFile({ path: "dir", content: bytes("x"), signal: never })).toMatchObject({ type: "error" });
  });

  it("stats without following the leaf but resolves the real path", async () => {
    await port.writeFile({ path: "real/target.txt", content: bytes("hello"), signal: never });
    const link = await port.exec({ command: ["ln", "-s", "/workspace/real", "/workspace/alias"], timeoutMs: 10_000, signal: never });
    expect(link).toMatchObject({ type: "exited", exitCode: 0 });

    const file = await port.stat({ path: "/workspace/alias/target.txt", signal: never });
    expect(file).toMatchObject({ type: "found", kind: "file", size: 5, realPath: "/workspace/real/target.txt" });
    if (file.type === "found") expect(Math.abs(file.mtimeMs - Date.now())).toBeLessThan(120_000);
    expect(await port.stat({ path: "alias", signal: never })).toMatchObject({
      type: "found",
      kind: "symlink",
      realPath: "/workspace/real",
    });
    expect(await port.stat({ path: "real", signal: never })).toMatchObject({
      type: "found",
      kind: "directory",
      realPath: "/workspace/real",
    });
    expect(await port.stat({ path: "missing/thing", signal: never })).toEqual({ type: "not_found" });
    expect(await port.stat({ path: "/workspace/with space & 'quote'", signal: never })).toEqual({ type: "not_found" });
  });

  it("lists recursively without following symlinks, skipping named directories, bounded", async () => {
    for (const path of ["tree/a.txt", "tree/sub/b.txt", "tree/node_modules/pkg/c.js", "tree/sub/.git/HEAD"]) {
      await port.writeFile({ path, content: bytes(path), signal: never });
    }
    await port.exec({ command: ["ln", "-s", "/etc", "/workspace/tree/etc-link"], timeoutMs: 10_000, signal: never });
    const all = await port.list({ path: "tree", recursive: true, maxEntries: 100, skipDirNames: ["node_modules", ".git"], signal: never });
    expect(all.type).toBe("ok");
    if (all.type !== "ok") return;
    expect(all.truncated).toBe(false);
    expect(all.entries.map((e) => [e.path, e.kind])).toEqual([
      ["/workspace/tree/a.txt", "file"],
      ["/workspace/tree/etc-link", "symlink"],
      ["/workspace/tree/sub", "directory"],
      ["/workspace/tree/sub/b.txt", "file"],
    ]);
    expect(all.entries[0]?.size).toBe("tree/a.txt".length);

    const flat = await port.list({ path: "/workspace/tree", recursive: false, maxEntries: 100, signal: never });
    expect(flat.type === "ok" && flat.entries.map((e) => e.path)).toEqual([
      "/workspace/tree/a.txt",
      "/workspace/tree/etc-link",
      "/workspace/tree/node_modules",
      "/workspace/tree/sub",
    ]);
    const cut = await port.list({ path: "tree", recursive: true, maxEntries: 2, signal: never });
    expect(cut.type === "ok" && [cut.entries.length, cut.truncated]).toEqual([2, true]);
    expect(await port.list({ path: "no-such-dir", recursive: true, maxEntries: 10, signal: never })).toEqual({ type: "not_found" });
    expect(await port.list({ path: "tree/a.txt", recursive: true, maxEntries: 10, signal: never })).toMatchObject({ type: "error" });
  });

  it("honours an aborted signal on file operations", async () => {
    const controller = new AbortController();
    controller.abort();
    expect((await port.readFile({ path: "big.txt", maxBytes: 100, signal: controller.signal })).type).toBe("error");
    expect((await port.writeFile({ path: "x", content: bytes("x"), signal: controller.signal })).type).toBe("error");
  });

  if (flavor === "base") {
    it("runs node, bash and ripgrep from the base image", async () => {
      await port.writeFile({ path: "hello.js", content: bytes("console.log(process.version, 6 * 7)"), signal: never });
      const node = await port.exec({ command: ["node", "hello.js"], timeoutMs: 20_000, signal: never });
      // The sandbox runs the same Node as the project (build-images copies it into the base image).
      expect(node.type === "exited" && text(node.stdout)).toBe(`${process.version} 42\n`);
      const tools = await port.exec({
        command: ["bash", "-c", "rg --version >/dev/null && unzip -v >/dev/null && tar --version >/dev/null && echo ok"],
        timeoutMs: 20_000,
        signal: never,
      });
      expect(tools.type === "exited" && text(tools.stdout)).toBe("ok\n");
    });
  }
});
