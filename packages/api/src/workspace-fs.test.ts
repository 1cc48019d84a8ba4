/**
 * The workspace browser's file access against a real directory a sandbox
 * could have written: traversal is refused before any open, a symlink at
 * the end or in the middle of a path is refused (never followed, whatever
 * it points at), a FIFO is refused without blocking, a file as a parent is
 * not found, and listings describe links as links.
 */
import { execFileSync } from "node:child_process";
import { mkdir, mkdtemp, rm, symlink, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ApiError } from "./errors.ts";
import { listOpenDirectory, MAX_LISTING_ENTRIES, openInWorkspace, workspaceSegments } from "./workspace-fs.ts";

let root: string;
let outside: string;

beforeAll(async () => {
  root = await mkdtemp(join(tmpdir(), "ws-root-"));
  outside = await mkdtemp(join(tmpdir(), "ws-outside-"));
  await writeFile(join(outside, "secret.txt"), "host secret");
  await mkdir(join(root, "src"));
  await writeFile(join(root, "src", "main.txt"), "main");
  await symlink(outside, join(root, "out"));
  await symlink(join(outside, "secret.txt"), join(root, "secret-link"));
  execFileSync("mkfifo", [join(root, "pipe")]);
});
afterAll(async () => {
  await rm(root, { recursive: true, force: true });
  await rm(outside, { recursive: true, force: true });
});

async function refusal(path: string): Promise<{ status: number; code: unknown }> {
  try {
    const opened = await openInWorkspace(root, workspaceSegments(path));
    await opened.fh.close();
    return { status: 200, code: opened.type };
  } catch (err) {
    if (!(err instanceof ApiError)) throw err;
    return { status: err.status, code: err.details?.error_code };
  }
}

describe("workspace paths", () => {
  it("refuses traversal and control characters before opening anything", () => {
    for (const path of ["..", "src/../..", "./src", "a/./b"]) expect(() => workspaceSegments(path)).toThrow(/without `.` or `..`/);
    expect(() => workspaceSegments("a\nb")).toThrow(/control characters/);
    expect(workspaceSegments("/src//main.txt")).toEqual(["src", "main.txt"]);
  });

  it("opens directories and regular files, and refuses links, FIFOs and missing paths", async () => {
    expect(await refusal("")).toEqual({ status: 200, code: "directory" });
    expect(await refusal("src/main.txt")).toEqual({ status: 200, code: "file" });
    expect(await refusal("out")).toEqual({ status: 400, code: "path_refused" });
    expect(await refusal("out/secret.txt")).toEqual({ status: 400, code: "path_refused" });
    expect(await refusal("secret-link")).toEqual({ status: 400, code: "path_refused" });
    expect(await refusal("pipe")).toEqual({ status: 400, code: "path_refused" });
    expect(await refusal("src/main.txt/x")).toEqual({ status: 404, code: undefined });
    expect(await refusal("missing")).toEqual({ status: 404, code: undefined });
  });

  it("lists at most a thousand entries of a huge directory, and says so", async () => {
    const many = join(root, "many");
    await mkdir(many);
    await Promise.all(Array.from({ length: MAX_LISTING_ENTRIES + 1 }, (_, i) => writeFile(join(many, `f${i}`), "")));
    const opened = await openInWorkspace(root, ["many"]);
    try {
      if (opened.type !== "directory") throw new Error("many is a directory");
      const { entries, truncated } = await listOpenDirectory(opened);
      expect(entries).toHaveLength(MAX_LISTING_ENTRIES);
      expect(truncated).toBe(true);
    } finally {
      await opened.fh.close();
      await rm(many, { recursive: true });
    }
  });

  it("lists links as links, with their own metadata", async () => {
    const opened = await openInWorkspace(root, []);
    try {
      if (opened.type !== "directory") throw new Error("root is a directory");
      const { entries, truncated } = await listOpenDirectory(opened);
      expect(truncated).toBe(false);
      expect(entries.map((e) => [e.name, e.type])).toEqual([
        ["out", "symlink"],
        ["pipe", "other"],
        ["secret-link", "symlink"],
        ["src", "directory"],
      ]);
    } finally {
      await opened.fh.close();
    }
  });
});
