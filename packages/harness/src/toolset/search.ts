/** `glob` and `grep`: workspace searches built on the port's listing and reads, so every sandbox supports them. */
import { posix } from "node:path";
import type { ListEntry, ToolSandboxPort } from "@openma/contract";
import { confine, decoder, encoder, type Input, optionalString, requiredString, ToolError, type ToolOutput } from "./common.ts";

const SKIP_DIRS = [".git", "node_modules"];
const MAX_WALK = 50_000;
const GLOB_MAX_RESULTS = 200;
export const GREP_OUTPUT_LIMIT = 100 * 1024;
const GREP_MAX_LINE = 2000;
const GREP_MAX_FILE_BYTES = 10 * 1024 * 1024;
const GREP_TIMEOUT_MS = 60_000;

function escapeRegex(ch: string): string {
  return /[\\^$.*+?()[\]{}|/]/.test(ch) ? `\\${ch}` : ch;
}

/** A glob (`*`, `**`, `?`, `[...]`, `{a,b}`) as an anchored regular expression over `/`-separated relative paths. */
export function globToRegExp(pattern: string): RegExp {
  let out = "";
  let braces = 0;
  for (let i = 0; i < pattern.length; i++) {
    const ch = pattern[i] as string;
    if (ch === "*") {
      if (pattern[i + 1] === "*") {
        const slash = pattern[i + 2] === "/";
        out += slash ? "(?:.*/)?" : ".*";
        i += slash ? 2 : 1;
      } else out += "[^/]*";
    } else if (ch === "?") out += "[^/]";
    else if (ch === "[") {
      const close = pattern.indexOf("]", i + 2);
      if (close === -1) out += "\\[";
      else {
        let body = pattern.slice(i + 1, close).replace(/\\/g, "\\\\");
        if (body.startsWith("!")) body = `^${body.slice(1)}`;
        out += `[${body}]`;
        i = close;
      }
    } else if (ch === "{") {
      braces++;
      out += "(?:";
    } else if (ch === "}" && braces > 0) {
      braces--;
      out += ")";
    } else if (ch === "," && braces > 0) out += "|";
    else out += escapeRegex(ch);
  }
  if (braces > 0) throw new ToolError("glob: unbalanced { in pattern");
  return new RegExp(`^${out}$`);
}

async function walk(port: ToolSandboxPort, tool: string, root: string, signal: AbortSignal): Promise<ListEntry[]> {
  const listed = await port.list({ path: root, recursive: true, maxEntries: MAX_WALK, skipDirNames: SKIP_DIRS, signal });
  if (listed.type === "not_found") throw new ToolError(`${tool}: ${root}: no such directory`);
  if (listed.type === "error") throw new ToolError(`${tool}: ${listed.message}`);
  return listed.entries.filter((e) => e.kind === "file");
}

export async function runGlob(port: ToolSandboxPort, input: Input, signal: AbortSignal): Promise<ToolOutput> {
  const pattern = requiredString("glob", input, "pattern");
  if (pattern.startsWith("/")) throw new ToolError("glob: absolute pattern not permitted; pass a relative pattern (and optionally path)");
  if (pattern.split("/").includes("..")) throw new ToolError('glob: ".." is not permitted in the pattern');
  const root = await confine(port, "glob", optionalString("glob", input, "path") ?? port.workdir, signal);
  const regex = globToRegExp(pattern);
  const matches = (await walk(port, "glob", root, signal))
    .filter((e) => regex.test(posix.relative(root, e.path)))
    .sort((a, b) => b.mtimeMs - a.mtimeMs || a.path.localeCompare(b.path));
  if (matches.length === 0) return { text: "no matches", isError: false };
  return {
    text: matches
      .slice(0, GLOB_MAX_RESULTS)
      .map((e) => e.path)
      .join("\n"),
    isError: false,
  };
}

/** Matching lines of one file's text, as `path:line:text`; the file ends at its first NUL byte. */
function grepText(path: string, bytes: Uint8Array, regex: RegExp, out: string[]): void {
  const nul = bytes.indexOf(0);
  const text = decoder.decode(nul === -1 ? bytes : bytes.subarray(0, nul));
  const lines = text.split("\n");
  for (let i = 0; i < lines.length; i++) {
    const line = (lines[i] as string).replace(/\r$/, "");
    if (line.length > GREP_MAX_LINE) continue;
    if (regex.test(line)) out.push(`${path}:${i + 1}:${line}`);
  }
}

export async function runGrep(port: ToolSandboxPort, input: Input, signal: AbortSignal): Promise<ToolOutput> {
  const pattern = requiredString("grep", input, "pattern");
  let regex: RegExp;
  try {
    regex = new RegExp(pattern);
  } catch (err) {
    throw new ToolError(`grep: invalid regex: ${err instanceof Error ? err.message : String(err)}`);
  }
  const root = await confine(port, "grep", optionalString("grep", input, "path") ?? port.workdir, signal);
  const deadline = AbortSignal.any([signal, AbortSignal.timeout(GREP_TIMEOUT_MS)]);
  const st = await port.stat({ path: root, signal });
  if (st.type !== "found") throw new ToolError(`grep: ${root}: no such file or directory`);
  const files = st.kind === "file" ? [root] : (await walk(port, "grep", root, signal)).map((e) => e.path);
  const lines: string[] = [];
  let bytes = 0;
  for (const file of files) {
    if (signal.aborted) throw new ToolError("grep: aborted");
    if (deadline.aborted) throw new ToolError(`grep: timed out after ${GREP_TIMEOUT_MS / 1000}s`);
    const read = await port.readFile({ path: file, maxBytes: GREP_MAX_FILE_BYTES, signal });
    if (read.type !== "ok") continue; // unreadable or oversized files are skipped, like a binary would be
    const found: string[] = [];
    grepText(file, read.content, regex, found);
    for (const line of found) {
      bytes += encoder.encode(line).length + 1;
      if (bytes > GREP_OUTPUT_LIMIT) {
        lines.push(`[output truncated at ${GREP_OUTPUT_LIMIT} bytes]`);
        return { text: lines.join("\n"), isError: false };
      }
      lines.push(line);
    }
  }
  return { text: lines.length ? lines.join("\n") : "no matches", isError: false };
}
