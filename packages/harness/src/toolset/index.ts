/** Runs one sandbox tool call through a ToolSandboxPort; every expected failure is an `is_error` output, never a throw. */
import type { ToolSandboxPort } from "@openma/contract";
import { type BashContext, runBash } from "./bash.ts";
import { fail, type Input, ToolError, type ToolOutput } from "./common.ts";
import { runEdit, runRead, runWrite } from "./files.ts";
import { runGlob, runGrep } from "./search.ts";

export type { BashContext } from "./bash.ts";
export type { ToolOutput } from "./common.ts";
export { SANDBOX_TOOL_DEFINITIONS, SANDBOX_TOOL_NAMES } from "./definitions.ts";

const TOOLS: Record<string, (port: ToolSandboxPort, input: Input, signal: AbortSignal, context?: BashContext) => Promise<ToolOutput>> = {
  bash: runBash,
  read: runRead,
  write: runWrite,
  edit: runEdit,
  glob: runGlob,
  grep: runGrep,
};

export async function runSandboxTool(
  port: ToolSandboxPort,
  name: string,
  input: unknown,
  signal: AbortSignal,
  context?: BashContext,
): Promise<ToolOutput> {
  const tool = TOOLS[name];
  if (!tool) return fail(`${name}: not a sandbox tool`);
  const args = input && typeof input === "object" && !Array.isArray(input) ? (input as Input) : {};
  try {
    return await tool(port, args, signal, context);
  } catch (err) {
    if (err instanceof ToolError) return fail(err.message);
    return fail(`Error: ${err instanceof Error ? err.message : String(err)}`);
  }
}
