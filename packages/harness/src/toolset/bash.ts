/**
 * `bash`: one command per call in a fresh `/bin/bash --noprofile --norc`
 * started in the workspace, stdout and stderr merged.
 *
 * Unlike the SDK worker's persistent shell, no shell survives between calls:
 * the loop is stateless and a turn may continue in another server process, so
 * `cd` and variables do not carry over (`restart` is accepted and is a no-op).
 */
import type { ToolSandboxPort } from "@openma/contract";
import {
  decoder,
  fail,
  type Input,
  keepTail,
  ok,
  optionalBoolean,
  optionalString,
  stripAnsi,
  ToolError,
  type ToolOutput,
} from "./common.ts";

export const BASH_OUTPUT_LIMIT = 100 * 1024;
export const BASH_DEFAULT_TIMEOUT_MS = 120_000;
const BASH_MAX_TIMEOUT_MS = 600_000;

function timeoutOf(input: Input): number {
  const v = input.timeout_ms;
  if (v === undefined || v === null) return BASH_DEFAULT_TIMEOUT_MS;
  if (typeof v !== "number" || !Number.isInteger(v) || v < 0) throw new ToolError("bash: timeout_ms must be a non-negative integer");
  return Math.min(v, BASH_MAX_TIMEOUT_MS);
}

function shape(raw: Uint8Array, truncated: boolean): string {
  const text = stripAnsi(decoder.decode(raw)).replace(/\n+$/, "");
  const cut = keepTail(text, BASH_OUTPUT_LIMIT, "[output truncated]");
  // The sandbox may already have dropped the head to respect the same bound.
  return truncated && cut === text ? `[output truncated]\n${text}` : cut;
}

export async function runBash(port: ToolSandboxPort, input: Input, signal: AbortSignal): Promise<ToolOutput> {
  const command = optionalString("bash", input, "command");
  const restart = optionalBoolean("bash", input, "restart");
  if (!command) {
    if (restart) return ok("bash session restarted");
    throw new ToolError("bash: command is required");
  }
  const timeoutMs = timeoutOf(input);
  // The SDK worker's semantics: 0 is an immediate timeout (decided here, not raced against a fast command).
  if (timeoutMs === 0) return fail("bash: command timed out after 0 ms");
  const result = await port.exec({
    // `exec 2>&1` first, so both streams reach the model in the order they were written.
    command: ["/bin/bash", "--noprofile", "--norc", "-c", `exec 2>&1\n${command}`],
    timeoutMs,
    signal,
    maxOutputBytes: BASH_OUTPUT_LIMIT,
  });
  switch (result.type) {
    case "error":
      return fail(`bash: ${result.message}`);
    case "aborted":
      return fail("bash: aborted");
    case "timeout": {
      const output = shape(result.stdout, result.truncated);
      return fail(`bash: command timed out after ${timeoutMs} ms${output ? `\n${output}` : ""}`);
    }
    case "exited": {
      const output = shape(result.stdout, result.truncated);
      if (result.exitCode === 0) return ok(output);
      const status = result.signal ? `killed by ${result.signal}` : `exit ${result.exitCode}`;
      return fail(output || status);
    }
  }
}
