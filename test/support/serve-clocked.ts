/**
 * `openma serve` on a clock the parent test process drives over IPC: the
 * serve command's own composition (config from the environment, real HTTP,
 * real storage, the deployment scheduler of apps/openma/src/automation.ts),
 * started in-process with an injected clock and scheduler waits — the one
 * way in (StartOptions.schedulerTimers), which no environment variable, file
 * or request reaches, so a production process cannot be put on a fake clock.
 *
 * Protocol: the parent sends `{init: ms}` (the clock's first value), then
 * batches `{ticks: [ms, …]}`. The scheduler ticks at `init`, then each time
 * it waits between ticks the clock moves to the batch's next value and the
 * wait ends at once (no wall time passes). `{at: ms}` reports a tick about to
 * run; `{done: ms}` that the batch's last tick finished.
 */
import type { Scheduler } from "@openma/time";
import { serveCommand } from "../../apps/openma/src/commands.ts";

if (!process.send) throw new Error("serve-clocked runs under a parent process with an IPC channel");
const send = (m: object) => process.send?.(m);

let now = Number.NaN;
const queue: number[] = [];
let wake: (() => void) | null = null;
let last = Number.NaN;

const timers: Scheduler = {
  now: () => now,
  async sleep(_ms, signal) {
    while (queue.length === 0) {
      // The batch is done (the tick at `last` has finished): report it and wait for the next one.
      if (!Number.isNaN(last)) send({ done: last });
      last = Number.NaN;
      await new Promise<void>((resolve, reject) => {
        wake = resolve;
        signal?.addEventListener("abort", () => reject(signal.reason), { once: true });
      });
    }
    now = queue.shift() as number;
    last = now;
    send({ at: now });
  },
};

process.on("message", (msg: { init?: number; ticks?: number[] }) => {
  if (typeof msg.init === "number") {
    now = msg.init;
    void serveCommand({ deps: { clock: { now: () => now } }, schedulerTimers: timers });
  }
  if (Array.isArray(msg.ticks)) {
    queue.push(...msg.ticks);
    const w = wake;
    wake = null;
    w?.();
  }
});
send({ ready: true });
