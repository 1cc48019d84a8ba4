import { link, mkdir, rename, rm, symlink, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { IssueError } from "./issues.ts";
import { DEFAULT_CHECKPOINT_LIMITS } from "./manifest.ts";
import { type TempDirs, tempDirs } from "./testkit.ts";
import { openVerified, type TreeEntry, walkTree } from "./walk.ts";

let t: TempDirs;
beforeEach(async () => {
  t = await tempDirs();
});
afterEach(async () => t.cleanup());

async function walkedFile(root: string, path: string) {
  const w = await walkTree(root, { limits: DEFAULT_CHECKPOINT_LIMITS, symlinks: "record" });
  const e = w.entries.find((x): x is Extract<TreeEntry, { type: "file" }> => x.path === path && x.type === "file");
  if (!e) throw new Error(`${path} not walked`);
  return { root: w.root, entry: e };
}

async function openIssue(root: string, entry: Extract<TreeEntry, { type: "file" }>) {
  try {
    await (await openVerified(root, entry)).close();
    return null;
  } catch (err) {
    if (err instanceof IssueError) return err.issue;
    throw err;
  }
}

describe("opening walked files under a hostile writer", () => {
  it("catches a parent directory swapped for a symlink to the same inode elsewhere", async () => {
    const ws = t.path("ws");
    await mkdir(join(ws, "sub"), { recursive: true });
    await writeFile(join(ws, "sub/f"), "inside");
    const { root, entry } = await walkedFile(ws, "sub/f");
    // Same inode reachable outside the tree, so only the real-path check can notice.
    await mkdir(t.path("outside"));
    await link(join(ws, "sub/f"), t.path("outside/f"));
    await rename(join(ws, "sub"), join(ws, "sub-moved"));
    await symlink(t.path("outside"), join(ws, "sub"));
    expect(await openIssue(root, entry)).toEqual({ code: "symlink_escape", path: "sub/f", message: "file resolves outside its tree" });
  });

  it("catches a file replaced by a symlink, by another file, or removed", async () => {
    const ws = t.path("ws");
    await mkdir(ws);
    await writeFile(join(ws, "f"), "x");
    const { root, entry } = await walkedFile(ws, "f");
    await rm(join(ws, "f"));
    expect(await openIssue(root, entry)).toMatchObject({ code: "changed", message: "entry disappeared while being read" });
    await symlink("/etc/hostname", join(ws, "f"));
    expect(await openIssue(root, entry)).toMatchObject({ code: "changed", message: expect.stringMatching(/symbolic link/) });
    await rm(join(ws, "f"));
    await writeFile(join(ws, "f"), "x");
    // ext4 hands the freed inode number straight back, so this may look like an in-place rewrite.
    expect(await openIssue(root, entry)).toMatchObject({ code: "changed", message: expect.stringMatching(/replaced|modified/) });
    await writeFile(t.path("other"), "other");
    await rename(t.path("other"), join(ws, "f"));
    expect(await openIssue(root, entry)).toMatchObject({ code: "changed", message: "file was replaced after it was listed" });
  });

  it("opens an untouched file", async () => {
    const ws = t.path("ws");
    await mkdir(ws);
    await writeFile(join(ws, "f"), "x");
    const { root, entry } = await walkedFile(ws, "f");
    expect(await openIssue(root, entry)).toBeNull();
  });
});
