/**
 * Memory path rules (§6.5) and the pure helpers listing and conflict checks
 * build on. A path is `/seg/…/seg`: 1–20 non-empty segments, at most 1024
 * UTF-8 bytes, NFC, no `.`/`..` segments, no control or format characters and
 * no U+2028/U+2029. The official worker keeps a marker file
 * `.anthropic-memory-store` at each local store root, so no memory may live
 * at (or under) that name: the worker would skip it or be unable to write it.
 */

export const MAX_PATH_BYTES = 1024;
export const MAX_SEGMENTS = 20;
export const MARKER_SEGMENT = ".anthropic-memory-store";

// \p{Cs} catches lone surrogates (the `u` flag makes them single code points).
const FORBIDDEN_CHARS = /[\p{Cc}\p{Cf}\p{Cs}\u2028\u2029]/u;

function segmentsProblem(segments: string[]): string | null {
  if (segments.length > MAX_SEGMENTS) return `must have at most ${MAX_SEGMENTS} segments`;
  if (segments.some((s) => s === "")) return "must not contain empty segments";
  if (segments.some((s) => s === "." || s === "..")) return "must not contain . or .. segments";
  return null;
}

function textProblem(text: string): string | null {
  if (Buffer.byteLength(text, "utf8") > MAX_PATH_BYTES) return `must be at most ${MAX_PATH_BYTES} bytes`;
  if (FORBIDDEN_CHARS.test(text)) return "must not contain control characters, format characters or line/paragraph separators";
  if (text.normalize("NFC") !== text) return "must be in Unicode Normalization Form C";
  return null;
}

/** Returns why `path` is not a valid memory path, or null when it is. */
export function memoryPathProblem(path: string): string | null {
  if (!path.startsWith("/")) return "must start with /";
  const problem = textProblem(path) ?? segmentsProblem(path.slice(1).split("/"));
  if (problem) return problem;
  if (path.slice(1).split("/")[0] === MARKER_SEGMENT) return `${MARKER_SEGMENT} is reserved for the worker's marker file`;
  return null;
}

/** A list `path_prefix`: `/` (whole store) or `/seg/…/seg/`, matched by whole segments. */
export function pathPrefixProblem(prefix: string): string | null {
  if (!prefix.startsWith("/")) return "must start with /";
  if (!prefix.endsWith("/")) return "must end with /";
  if (prefix === "/") return null;
  return textProblem(prefix) ?? segmentsProblem(prefix.slice(1, -1).split("/"));
}

/** Proper ancestors of a path: `/a/b/c` → [`/a`, `/a/b`]. */
export function ancestorsOf(path: string): string[] {
  const segments = path.slice(1).split("/");
  const out: string[] = [];
  for (let i = 1; i < segments.length; i++) out.push(`/${segments.slice(0, i).join("/")}`);
  return out;
}

/**
 * Exclusive upper bound of every string starting with `prefix` (which ends
 * with `/`), in bytewise order: `'0'` is the byte right after `'/'`, so
 * `prefix <= s < upper` holds exactly for the strings under `prefix`.
 */
export function prefixUpperBound(prefix: string): string {
  if (!prefix.endsWith("/")) throw new Error("prefix must end with /");
  return `${prefix.slice(0, -1)}0`;
}

/**
 * With a listing `depth` > 0, a memory more than `depth` segments below
 * `prefix` is represented by the rollup `prefix + first depth segments + /`;
 * returns that rollup, or null when the memory is listed itself.
 */
export function rollupOf(path: string, prefix: string, depth: number): string | null {
  if (depth <= 0 || !path.startsWith(prefix)) return null;
  const rest = path.slice(prefix.length).split("/");
  if (rest.length <= depth) return null;
  return `${prefix}${rest.slice(0, depth).join("/")}/`;
}
