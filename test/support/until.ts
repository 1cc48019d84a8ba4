/**
 * Waits on a condition a test cannot be told about (a child process's log
 * rows, containers at the Docker Engine): polls `check` until it holds, and
 * fails naming `what` after `limitMs`. The limit only bounds a broken run;
 * nothing is decided by how long anything takes.
 */
import { setTimeout as delay } from "node:timers/promises";

export async function until(check: () => Promise<boolean>, what: string, limitMs = 60_000): Promise<void> {
  const deadline = Date.now() + limitMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await delay(25);
  }
}
