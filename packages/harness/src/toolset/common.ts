/** Shared pieces of the sandbox tools: the result shape, input checks, output shaping and path confinement. */
import { posix } from "node:path";
import type { ToolSandboxPort } from "@openma/contract";

export interface ToolOutput {
  text: string;
  isError: boolean;
}

export const ok = (text: string): ToolOutput => ({ text: text === "" ? "(no output)" : text, isError: false });
export const fail = (text: string): ToolOutput => ({ text, isError: true });

/** Thrown inside a tool for an expected refusal; becomes an `is_error` result with this message. */
export class ToolError extends Error {}

export type Input = Record<string, unknown>;

export function requiredString(tool: string, input: Input, field: string): string {
  const v = input[field];
  if (typeof v !== "string" || v === "") throw new ToolError(`${tool}: ${field} is required`);
  return v;
}

export function optionalString(tool: string, input: Input, field: string): string | undefined {
  const v = input[field];
  if (v === undefined || v === null) return undefined;
  if (typeof v !== "string") throw new ToolError(`${tool}: ${field} must be a string`);
  return v;
}

export function optionalBoolean(tool: string, input: Input, field: string): boolean {
  const v = input[field];
  if (v === undefined || v === null) return false;
  if (typeof v !== "boolean") throw new ToolError(`${tool}: ${field} must be a boolean`);
  return v;
}

// biome-ignore lint/suspicious/noControlCharactersInRegex: ANSI escape sequences are control characters by definition.
const ANSI = /\u001b\[[0-?]*[ -/]*[@-~]|\u001b\][^\u0007\u001b]*(?:\u0007|\u001b\\)|\u001b[@-Z\\-_]/g;

export function stripAnsi(text: string): string {
  return text.replace(ANSI, "");
}

export const decoder = new TextDecoder("utf-8");
export const encoder = new TextEncoder();

/** Keeps the last `limit` bytes of `text` (on a character boundary), prefixed with a marker when cut. */
export function keepTail(text: string, limit: number, marker: string): string {
  const bytes = encoder.encode(text);
  if (bytes.length <= limit) return text;
  let start = bytes.length - limit;
  while (start < bytes.length && ((bytes[start] as number) & 0xc0) === 0x80) start++;
  return `${marker}\n${decoder.decode(bytes.subarray(start))}`;
}

function inside(root: string, path: string): boolean {
  return path === root || path.startsWith(root.endsWith("/") ? root : `${root}/`);
}

/** Canonical path: the realpath of the deepest existing ancestor plus the not-yet-existing rest. */
async function canonical(port: ToolSandboxPort, path: string, signal: AbortSignal): Promise<string> {
  const rest: string[] = [];
  let current = path;
  for (;;) {
    const st = await port.stat({ path: current, signal });
    if (st.type === "found") return rest.length ? posix.join(st.realPath, ...rest.reverse()) : st.realPath;
    if (st.type === "error") throw new ToolError(st.message);
    const parent = posix.dirname(current);
    if (parent === current) return path;
    rest.push(posix.basename(current));
    current = parent;
  }
}

/**
 * Resolves a tool's path argument against the workspace, fully canonical
 * (symlinks included), and refuses anything that lands outside it.
 */
export async function confine(port: ToolSandboxPort, tool: string, raw: string, signal: AbortSignal): Promise<string> {
  const abs = posix.isAbsolute(raw) ? posix.normalize(raw) : posix.join(port.workdir, raw);
  const root = await canonical(port, port.workdir, signal);
  const real = await canonical(port, abs, signal);
  if (!inside(root, real)) throw new ToolError(`${tool}: path ${JSON.stringify(raw)} is outside the session's working directory`);
  return real;
}
