/**
 * The bash program the persistent shell is started with, and the line that
 * runs one command in it. Each command is evaluated in the shell itself (so
 * `cd`, `export` and `&` jobs stay), reading /dev/null, with stdout and
 * stderr merged, bracketed by markers carrying a per-command random nonce.
 *
 * The timeout is enforced inside the sandbox, by a watchdog the shell forks
 * before each command: when it fires it prints the timeout marker, then every
 * 100 ms (until the command is over) sends the shell SIGUSR1, whose trap
 * `return`s out of the running function frame, and SIGKILLs the shell's
 * descendants except the jobs that existed before the command (their pids
 * are passed in) and processes that ignore SIGINT: without job control bash
 * starts `&` jobs with SIGINT ignored (POSIX), so the command's own simple
 * background jobs survive the kill too (when the shell itself started with
 * SIGINT at its default, see LAUNCH). A command the watchdog
 * cannot stop (a trapped signal loop, a program ignoring SIGINT itself) is
 * caught by the caller's backstop, which replaces the shell.
 *
 * Only bash builtins and `sleep` are used, and /proc of the shell's own pid
 * namespace, which every driver's Linux sandbox has.
 */
import { readFileSync } from "node:fs";

/**
 * Starts bash with SIGINT at its default: a launcher that ran it as a
 * background job (the remote kit's wrapper does) leaves it ignored, and bash
 * cannot undo that itself. Without `env --default-signal` (busybox) the shell
 * says so and the timeout kills the command's own `&` jobs too.
 */
export const LAUNCH =
  "if env --default-signal=INT true 2>/dev/null; then exec env --default-signal=INT /bin/bash --noprofile --norc; fi; exec /bin/bash --noprofile --norc";

export const SHELL_INIT = readFileSync(new URL("./shell-init.bash", import.meta.url), "utf8");

/** `'...'` quoting for bash: safe for any text, newlines included. */
function quote(text: string): string {
  return `'${text.replaceAll("'", `'\\''`)}'`;
}

/** The stdin line that runs `command` with a timeout; its output ends with `endMarker(nonce)` and the status. */
export function commandLine(command: string, timeoutMs: number, nonce: string): string {
  const seconds = (timeoutMs / 1000).toFixed(3);
  return `__openma_start ${seconds} ${nonce} $(jobs -p); __openma_run ${quote(command)}; __openma_done $? ${nonce}\n`;
}

export const READY_MARKER = "\n__OPENMA_READY\n";
export const timeoutMarker = (nonce: string) => `\n__OPENMA_TIMEOUT_${nonce}\n`;
export const endMarker = (nonce: string) => `\n__OPENMA_END_${nonce} `;
