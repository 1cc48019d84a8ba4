import { describe, expect, it } from "vitest";
import { ExecRecord } from "./execs.ts";
import { safeSubPath } from "./table.ts";

function recorded(): { exec: ExecRecord; written: string[]; closed: () => boolean } {
  const exec = new ExecRecord("ex-1", ["cat"]);
  const written: string[] = [];
  let closed = false;
  exec.attach({
    write: async (chunk) => {
      written.push(Buffer.from(chunk).toString());
    },
    closeStdin: () => {
      closed = true;
    },
  });
  return { exec, written, closed: () => closed };
}

describe("an exec's stdin, by offset", () => {
  it("applies writes in order, skips bytes a retry repeats, and closes once", async () => {
    const { exec, written, closed } = recorded();
    await exec.writeStdin(0, Buffer.from("abc"), false);
    // A retry of the same write after a lost answer, then one overlapping the end of it.
    await exec.writeStdin(0, Buffer.from("abc"), false);
    await exec.writeStdin(2, Buffer.from("cde"), false);
    await exec.writeStdin(5, new Uint8Array(0), true);
    await exec.writeStdin(5, new Uint8Array(0), true);
    expect(written).toEqual(["abc", "de"]);
    expect(exec.stdinOffset).toBe(5);
    expect(closed()).toBe(true);
  });

  it("refuses a gap and bytes after the end of input", async () => {
    const { exec } = recorded();
    await expect(exec.writeStdin(4, Buffer.from("x"), false)).rejects.toThrow(/past the 0 bytes/);
    await exec.writeStdin(0, Buffer.from("x"), true);
    await expect(exec.writeStdin(1, Buffer.from("y"), false)).rejects.toThrow(/closed/);
  });
});

describe("an exec's output, by offset", () => {
  it("reads from any offset and wakes a waiting reader on output and on exit", async () => {
    const exec = new ExecRecord("ex-2", ["echo"]);
    const waiting = exec.changed(new AbortController().signal);
    exec.append("stdout", Buffer.from("hello "));
    await waiting;
    exec.append("stdout", Buffer.from("world"));
    expect(exec.read("stdout", 3, 100).toString()).toBe("lo world");
    expect(exec.read("stdout", 0, 4).toString()).toBe("hell");
    expect(exec.read("stderr", 0, 4).length).toBe(0);
    const ending = exec.changed(new AbortController().signal);
    exec.finish({ code: 3 });
    await ending;
    exec.finish({ code: 9 });
    expect(exec.exit).toEqual({ code: 3 });
  });
});

describe("a volume subpath from a client", () => {
  it("stays inside the volume", () => {
    expect(safeSubPath(undefined)).toBe("");
    expect(safeSubPath("/")).toBe("");
    expect(safeSubPath("sessions/openma-abc")).toBe("sessions/openma-abc");
    expect(safeSubPath("/sessions//x/")).toBe("sessions/x");
    expect(safeSubPath("a/./b")).toBe("a/b");
    expect(safeSubPath("..")).toBeNull();
    expect(safeSubPath("../etc")).toBeNull();
    expect(safeSubPath("a/../../etc")).toBeNull();
    expect(safeSubPath("a\0b")).toBeNull();
  });
});
