/** `read`, `write` and `edit`: file tools confined to the workspace (§7). */
import type { ReadFileResult, ToolSandboxPort } from "@openma/contract";
import { confine, decoder, encoder, type Input, ok, optionalBoolean, requiredString, ToolError, type ToolOutput } from "./common.ts";

/** Whole-file cap for `read` and `edit` (the SDK's default `maxFileBytes`). */
export const MAX_FILE_BYTES = 262_144;
/** A ranged read may scan a larger file; the cap then applies to the selected lines. */
const RANGE_SCAN_BYTES = 64 * 1024 * 1024;

function readProblem(tool: string, path: string, result: Exclude<ReadFileResult, { type: "ok" }>, limit: number): ToolError {
  switch (result.type) {
    case "not_found":
      return new ToolError(`${tool}: ${path}: no such file`);
    case "not_a_file":
      return new ToolError(`${tool}: ${path} is not a regular file`);
    case "too_large":
      return new ToolError(
        limit === MAX_FILE_BYTES
          ? `${tool}: ${path} is ${result.size} bytes, exceeds ${limit}-byte limit. Read it in parts with view_range.`
          : `${tool}: ${path} is ${result.size} bytes, too large to scan`,
      );
    case "error":
      return new ToolError(`${tool}: ${result.message}`);
  }
}

function viewRange(input: Input): [number, number] | null {
  const v = input.view_range;
  if (v === undefined || v === null) return null;
  if (!Array.isArray(v) || v.length !== 2 || !v.every((n) => Number.isInteger(n))) {
    throw new ToolError("read: view_range must be [start_line, end_line]");
  }
  const [start, end] = v as [number, number];
  if (start < 1) throw new ToolError("read: view_range start_line must be at least 1");
  if (end > 0 && end < start) throw new ToolError("read: view_range end_line must not be before start_line");
  return [start, end];
}

export async function runRead(port: ToolSandboxPort, input: Input, signal: AbortSignal): Promise<ToolOutput> {
  const filePath = requiredString("read", input, "file_path");
  const range = viewRange(input);
  const path = await confine(port, "read", filePath, signal);
  const limit = range ? RANGE_SCAN_BYTES : MAX_FILE_BYTES;
  const result = await port.readFile({ path, maxBytes: limit, signal });
  if (result.type !== "ok") throw readProblem("read", filePath, result, limit);
  const text = decoder.decode(result.content);
  if (!range) return { text, isError: false };
  const lines = text.split("\n");
  const [start, end] = range;
  const selected = lines.slice(start - 1, end <= 0 ? undefined : end).join("\n");
  if (encoder.encode(selected).length > MAX_FILE_BYTES) {
    throw new ToolError(`read: view_range [${start}, ${end}] of ${filePath} exceeds ${MAX_FILE_BYTES}-byte limit. Use a smaller range.`);
  }
  return { text: selected, isError: false };
}

export async function runWrite(port: ToolSandboxPort, input: Input, signal: AbortSignal): Promise<ToolOutput> {
  const filePath = requiredString("write", input, "file_path");
  const content = input.content;
  if (typeof content !== "string") throw new ToolError("write: content is required");
  const path = await confine(port, "write", filePath, signal);
  const bytes = encoder.encode(content);
  const result = await port.writeFile({ path, content: bytes, mode: 0o600, signal });
  if (result.type === "error") throw new ToolError(`write: ${result.message}`);
  return ok(`wrote ${bytes.length} bytes to ${filePath}`);
}

function occurrences(haystack: string, needle: string): number {
  let n = 0;
  for (let at = haystack.indexOf(needle); at !== -1; at = haystack.indexOf(needle, at + needle.length)) n++;
  return n;
}

export async function runEdit(port: ToolSandboxPort, input: Input, signal: AbortSignal): Promise<ToolOutput> {
  const filePath = requiredString("edit", input, "file_path");
  const oldString = requiredString("edit", input, "old_string");
  const newString = input.new_string;
  if (typeof newString !== "string") throw new ToolError("edit: new_string is required");
  const replaceAll = optionalBoolean("edit", input, "replace_all");
  const path = await confine(port, "edit", filePath, signal);
  const read = await port.readFile({ path, maxBytes: MAX_FILE_BYTES, signal });
  if (read.type !== "ok") throw readProblem("edit", filePath, read, MAX_FILE_BYTES);
  const text = decoder.decode(read.content);
  const count = occurrences(text, oldString);
  if (count === 0) throw new ToolError(`edit: old_string not found in ${filePath}`);
  if (count > 1 && !replaceAll) throw new ToolError(`edit: old_string appears ${count} times in ${filePath} (must be unique)`);
  // split/join and a single slice replace literally: no `$&`-style patterns in new_string are expanded.
  const next = replaceAll
    ? text.split(oldString).join(newString)
    : text.slice(0, text.indexOf(oldString)) + newString + text.slice(text.indexOf(oldString) + oldString.length);
  const written = await port.writeFile({ path, content: encoder.encode(next), signal });
  if (written.type === "error") throw new ToolError(`edit: write: ${written.message}`);
  return ok(`edited ${filePath} (${replaceAll ? count : 1} replacement(s))`);
}
