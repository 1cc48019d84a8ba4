/**
 * The archive a remote runtime hands back is hostile input. These build
 * archives with tar-stream directly (as a compromised sandbox could) and
 * check that extraction stays inside its directory, refuses what it cannot
 * represent safely, and round-trips an honest tree exactly.
 */
import { lstat, mkdir, mkdtemp, readFile, readlink, rm, symlink, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { type Header, pack as tarPack } from "tar-stream";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { entryName, extractInto, packDirectory } from "./tar.ts";

type Entry = Partial<Header> & { name: string; body?: string };

async function archive(entries: Entry[]): Promise<Buffer> {
  const pack = tarPack();
  const chunks: Buffer[] = [];
  const collected = (async () => {
    for await (const chunk of pack) chunks.push(Buffer.from(chunk as Uint8Array));
  })();
  for (const { body, ...header } of entries) {
    await new Promise<void>((resolve, reject) => {
      const done = (err?: Error | null) => (err ? reject(err) : resolve());
      if (body === undefined) pack.entry(header, done);
      else pack.entry(header, body, done);
    });
  }
  pack.finalize();
  await collected;
  return Buffer.concat(chunks);
}

let root: string;
let outside: string;

beforeEach(async () => {
  root = await mkdtemp(join(tmpdir(), "openma-tar-"));
  outside = await mkdtemp(join(tmpdir(), "openma-tar-outside-"));
});

afterEach(async () => {
  await rm(root, { recursive: true, force: true });
  await rm(outside, { recursive: true, force: true });
});

describe("entry names", () => {
  it("confines names and refuses escapes", () => {
    expect(entryName("./a/b.txt")).toBe("a/b.txt");
    expect(entryName("dir/")).toBe("dir");
    expect(entryName(".")).toBe("");
    expect(entryName("/etc/passwd")).toBeNull();
    expect(entryName("a/../../x")).toBeNull();
    expect(entryName("a//b")).toBeNull();
    expect(entryName("a\0b")).toBeNull();
  });
});

describe("extraction of a hostile archive", () => {
  it("refuses a path that climbs out", async () => {
    const result = await extractInto(await archive([{ name: "../escape.txt", body: "x" }]), root);
    expect(result).toMatchObject({ ok: false });
  });

  it("refuses an absolute path", async () => {
    const result = await extractInto(await archive([{ name: `${outside}/x.txt`, body: "x" }]), root);
    expect(result).toMatchObject({ ok: false });
  });

  it("records a symlink but never writes through it", async () => {
    const result = await extractInto(
      await archive([
        { name: "link", type: "symlink", linkname: outside },
        { name: "link/pwned.txt", body: "x" },
      ]),
      root,
    );
    expect(result).toMatchObject({ ok: false });
    expect(result.ok === false && result.error).toContain("non-directory");
    await expect(lstat(join(outside, "pwned.txt"))).rejects.toThrow();
    expect(await readlink(join(root, "link"))).toBe(outside);
  });

  it("replaces a symlink with a file instead of following it", async () => {
    await writeFile(join(outside, "target.txt"), "original");
    const result = await extractInto(
      await archive([
        { name: "f", type: "symlink", linkname: join(outside, "target.txt") },
        { name: "f", body: "replaced" },
      ]),
      root,
    );
    expect(result).toMatchObject({ ok: true, files: 1 });
    expect(await readFile(join(outside, "target.txt"), "utf8")).toBe("original");
    expect(await readFile(join(root, "f"), "utf8")).toBe("replaced");
  });

  it("skips hard links and devices, strips setuid bits", async () => {
    const result = await extractInto(
      await archive([
        { name: "plain", body: "p", mode: 0o4755 },
        { name: "hard", type: "link", linkname: "plain" },
        { name: "dev", type: "character-device", devmajor: 1, devminor: 3 },
      ]),
      root,
    );
    expect(result).toEqual({ ok: true, files: 1, bytes: 1, skipped: ["hard", "dev"] });
    expect((await lstat(join(root, "plain"))).mode & 0o7777).toBe(0o755);
  });

  it("bounds entries and bytes", async () => {
    const many = await archive(Array.from({ length: 5 }, (_, i) => ({ name: `f${i}`, body: "0123456789" })));
    expect(await extractInto(many, root, { maxEntries: 4, maxBytes: 1000 })).toMatchObject({ ok: false });
    await rm(root, { recursive: true });
    await mkdir(root);
    expect(await extractInto(many, root, { maxEntries: 100, maxBytes: 25 })).toMatchObject({ ok: false });
  });

  it("refuses bytes that are not an archive", async () => {
    expect(await extractInto(Buffer.from("this is not a tar archive, just text that is long enough".repeat(20)), root)).toMatchObject({
      ok: false,
    });
  });
});

describe("round trip", () => {
  it("packs and extracts files, directories and symlinks unchanged", async () => {
    const source = await mkdtemp(join(tmpdir(), "openma-tar-src-"));
    try {
      await mkdir(join(source, "dir/nested"), { recursive: true });
      await writeFile(join(source, "dir/nested/a.txt"), "alpha");
      await writeFile(join(source, "b.bin"), Buffer.from([0, 1, 2, 255]));
      await symlink("dir/nested/a.txt", join(source, "link"));
      const result = await extractInto(await packDirectory(source), root);
      expect(result).toMatchObject({ ok: true, files: 2 });
      expect(await readFile(join(root, "dir/nested/a.txt"), "utf8")).toBe("alpha");
      expect([...(await readFile(join(root, "b.bin")))]).toEqual([0, 1, 2, 255]);
      expect(await readlink(join(root, "link"))).toBe("dir/nested/a.txt");
    } finally {
      await rm(source, { recursive: true, force: true });
    }
  });
});
