/**
 * A spinner while a turn runs, for people only: on a TTY it redraws one line
 * (frame, label, seconds so far) ten times a second; anything printed clears
 * it first and it comes back on the next frame. On a pipe it does nothing, so
 * scripts and logs never see it.
 */
import type { Output } from "./resources.ts";

const FRAMES = ["⠋", "⠙", "⠹", "⠸", "⠼", "⠴", "⠦", "⠧", "⠇", "⠏"];
const FRAME_MS = 100;

export interface Spinner {
  start(label: string): void;
  /** Erases the line (before printing something else); the next frame draws it again. */
  clear(): void;
  stop(): void;
}

export function spinner(out: Output, now: () => number = Date.now): Spinner {
  const tty = out.io.stdout.isTTY === true;
  let timer: ReturnType<typeof setInterval> | undefined;
  let label = "";
  let since = 0;
  let frame = 0;
  let shown = false;
  const draw = () => {
    const seconds = Math.floor((now() - since) / 1000);
    out.io.stdout.write(`\r${out.paint("dim", `${FRAMES[frame++ % FRAMES.length]} ${label} ${seconds}s`)}\x1b[K`);
    shown = true;
  };
  const clear = () => {
    if (shown) out.io.stdout.write("\r\x1b[K");
    shown = false;
  };
  return {
    start(text) {
      label = text;
      if (!tty || timer) return;
      since = now();
      frame = 0;
      timer = setInterval(draw, FRAME_MS);
      draw();
    },
    clear,
    stop() {
      if (timer) clearInterval(timer);
      timer = undefined;
      clear();
    },
  };
}
