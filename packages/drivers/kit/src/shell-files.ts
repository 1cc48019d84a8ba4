/**
 * The file half of a ToolSandboxPort (stat, read, write, list) as the shell
 * programs of `sh-programs.ts`, run through whatever exec primitive a driver
 * has. The driver supplies `run` (one program to completion, its stdout
 * bounded); this module owns the programs' exit codes and output formats,
 * so every driver that uses them reports the same values for the same
 * files.
 */
import type { EntryKind, ExecResult, ListEntry, ListResult, ReadFileResult, StatResult, WriteFileResult } from "@openma/contract";
import { FILE_EXIT, LIST_DIR, READ_FILE, STAT_PATH, WRITE_FILE } from "./sh-programs.ts";

/** Runs `/bin/sh -c <script> openma-file <args...>` from `/` with `stdin`, keeping at most `maxOutputBytes` of stdout. */
export type ShellRunner = (
  script: string,
  args: string[],
  signal: AbortSignal,
  stdin?: Uint8Array,
  maxOutputBytes?: number,
) => Promise<ExecResult>;

/** Upper bound of a listing's output per entry (path + fields), for the capture buffer. */
const LIST_BYTES_PER_ENTRY = 4200;

export function kindOf(fileType: string): EntryKind {
  if (fileType.startsWith("regular")) return "file";
  if (fileType === "directory") return "directory";
  if (fileType === "symbolic link") return "symlink";
  return "other";
}

/** `<size> <mtime> <type words>` as printed by `stat -c '%s %Y %F'`. */
export function parseStatFields(text: string): { size: number; mtimeMs: number; kind: EntryKind } | null {
  const match = /^(\d+) (\d+) (.+)$/.exec(text);
  if (!match) return null;
  return { size: Number(match[1]), mtimeMs: Number(match[2]) * 1000, kind: kindOf(match[3] as string) };
}

const text = (bytes: Uint8Array) => Buffer.from(bytes).toString("utf8");

/** What a failed program said, for an `error` value. */
export function failureOf(result: ExecResult): string {
  switch (result.type) {
    case "error":
      return result.message;
    case "timeout":
      return "timed out";
    case "aborted":
      return "aborted";
    case "exited": {
      const detail = text(result.stderr).trim().split("\n").slice(-3).join("; ");
      return detail || `exit code ${result.exitCode}`;
    }
  }
}

export class ShellFiles {
  constructor(private readonly run: ShellRunner) {}

  async stat(path: string, signal: AbortSignal): Promise<StatResult> {
    const result = await this.run(STAT_PATH, [path], signal);
    if (result.type !== "exited") return { type: "error", message: failureOf(result) };
    if (result.exitCode === FILE_EXIT.notFound) return { type: "not_found" };
    if (result.exitCode !== 0) return { type: "error", message: failureOf(result) };
    const out = text(result.stdout);
    const newline = out.indexOf("\n");
    const fields = parseStatFields(newline < 0 ? out : out.slice(0, newline));
    if (!fields || newline < 0) return { type: "error", message: `stat: unexpected output ${JSON.stringify(out.slice(0, 200))}` };
    return { type: "found", ...fields, realPath: out.slice(newline + 1) };
  }

  async readFile(path: string, maxBytes: number, signal: AbortSignal): Promise<ReadFileResult> {
    const limit = Math.max(0, Math.floor(maxBytes));
    // One byte over the limit tells a file that grew past it after the size check.
    const result = await this.run(READ_FILE, [path, String(limit)], signal, undefined, limit + 1);
    if (result.type !== "exited") return { type: "error", message: failureOf(result) };
    switch (result.exitCode) {
      case 0:
        if (result.truncated || result.stdout.length > limit) return { type: "too_large", size: result.stdout.length };
        return { type: "ok", content: result.stdout, size: result.stdout.length };
      case FILE_EXIT.notFound:
        return { type: "not_found" };
      case FILE_EXIT.notAFile:
        return { type: "not_a_file", kind: kindOf(text(result.stderr).trim()) };
      case FILE_EXIT.tooLarge:
        return { type: "too_large", size: Number(text(result.stderr).trim()) || limit + 1 };
      default:
        return { type: "error", message: failureOf(result) };
    }
  }

  async writeFile(path: string, content: Uint8Array, mode: number | undefined, signal: AbortSignal): Promise<WriteFileResult> {
    const bits = (mode ?? 0o600) & 0o7777;
    const result = await this.run(WRITE_FILE, [path, bits.toString(8)], signal, content);
    if (result.type === "exited" && result.exitCode === 0) return { type: "ok", bytes: content.length };
    if (result.type === "exited" && result.exitCode === FILE_EXIT.isDirectory) {
      return { type: "error", message: `${JSON.stringify(path)} is a directory` };
    }
    return { type: "error", message: failureOf(result) };
  }

  async list(input: {
    path: string;
    recursive: boolean;
    maxEntries: number;
    skipDirNames?: readonly string[];
    signal: AbortSignal;
  }): Promise<ListResult> {
    const maxEntries = Math.max(0, Math.floor(input.maxEntries));
    const skip = (input.skipDirNames ?? []).filter((name) => name.length > 0 && !name.includes("/"));
    const args = [input.path, input.recursive ? "1" : "0", String(maxEntries), ...skip];
    const result = await this.run(LIST_DIR, args, input.signal, undefined, (maxEntries + 1) * LIST_BYTES_PER_ENTRY);
    if (result.type !== "exited") return { type: "error", message: failureOf(result) };
    if (result.exitCode === FILE_EXIT.notFound) return { type: "not_found" };
    if (result.exitCode === FILE_EXIT.notAFile) return { type: "error", message: `${JSON.stringify(input.path)} is not a directory` };
    if (result.exitCode !== 0) return { type: "error", message: failureOf(result) };
    const entries: ListEntry[] = [];
    for (const line of text(result.stdout).split("\n")) {
      const bar = line.indexOf("|");
      if (bar < 0) continue;
      const fields = parseStatFields(line.slice(0, bar));
      // A name containing a newline splits into lines that do not parse; such entries are skipped.
      if (fields) entries.push({ path: line.slice(bar + 1), ...fields });
    }
    entries.sort((a, b) => (a.path < b.path ? -1 : a.path > b.path ? 1 : 0));
    const truncated = entries.length > maxEntries;
    return { type: "ok", entries: truncated ? entries.slice(0, maxEntries) : entries, truncated };
  }
}
