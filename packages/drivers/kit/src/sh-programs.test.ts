/**
 * The exec wrapper under the shells sandboxes have as `/bin/sh` (dash on
 * Debian images, busybox ash on the busybox image, bash elsewhere), run as
 * real processes: the exit status it reports is the command's, also when
 * something in its process group sends TERM to the group (a nested
 * wrapper's cleanup does exactly that).
 */
import { spawn } from "node:child_process";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { EXEC_WRAPPER } from "./sh-programs.ts";

const SHELLS: Array<[string, string[]]> = [
  ["dash", ["dash"]],
  ["bash", ["bash"]],
  ["busybox ash", ["busybox", "sh"]],
];

let dir: string;
beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), "openma-wrapper-"));
});
afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

/** Runs argv under the wrapper as its own session (as an exec is), resolving with the wrapper's exit status. */
function wrapped(shell: string[], name: string, argv: string[]): Promise<number | string> {
  const [file, ...args] = shell as [string, ...string[]];
  const child = spawn("setsid", ["-w", file, ...args, "-c", EXEC_WRAPPER, name, join(dir, `${name}.pid`), "", "/", ...argv], {
    stdio: ["ignore", "ignore", "ignore"],
  });
  return new Promise((resolve, reject) => {
    child.once("error", reject);
    child.once("exit", (code, signal) => resolve(code ?? `signal ${signal}`));
  });
}

describe.each(SHELLS)("the exec wrapper under %s", (_name, shell) => {
  it("reports the command's own exit status", async () => {
    expect(await wrapped(shell, "plain", ["sh", "-c", "exit 7"])).toBe(7);
  });

  it("reports a command ended by TERM as 143", async () => {
    expect(await wrapped(shell, "termed", ["sh", "-c", "kill -TERM $$"])).toBe(143);
  });

  it("survives TERM sent to its group while the command starts, runs and ends", async () => {
    // The command ignores TERM and signals the whole group from its first instant until after it exits:
    // whatever point the wrapper has reached, it must neither die nor report the interruption.
    const storm = "trap '' TERM; ( i=0; while [ $i -lt 40 ]; do kill -TERM 0; i=$((i+1)); done ) & kill -TERM 0; wait; exit 5";
    expect(await wrapped(shell, "storm", ["sh", "-c", storm])).toBe(5);
  });

  it("survives a nested wrapper's cleanup TERM", async () => {
    const [file, ...args] = shell as [string, ...string[]];
    const inner = [file, ...args, "-c", EXEC_WRAPPER, "inner", join(dir, "inner.pid"), "", "/", "mkdir", "-p", join(dir, "made")];
    expect(await wrapped(shell, "outer", inner)).toBe(0);
  });
});
