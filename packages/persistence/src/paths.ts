/**
 * Logical paths inside a workspace or output tree: relative, `/`-separated,
 * valid UTF-8, never absolute and never climbing out with `..`. Every path
 * that crosses a trust boundary (walked from a sandbox, read from a manifest)
 * goes through `checkLogicalPath` before it is joined to a host directory.
 */
import { posix } from "node:path";

export interface PathLimits {
  /** UTF-8 bytes of the whole logical path. */
  maxPathBytes: number;
  /** Number of segments. */
  maxDepth: number;
}

export const HEX64 = /^[0-9a-f]{64}$/;

const strictUtf8 = new TextDecoder("utf-8", { fatal: true });

/** Decodes a raw directory entry name; `null` when it is not valid UTF-8 (it could not round-trip through JSON). */
export function decodeName(raw: Buffer): string | null {
  try {
    return strictUtf8.decode(raw);
  } catch {
    return null;
  }
}

/** A reason string when the path is unacceptable, otherwise `null`. */
export function checkLogicalPath(path: unknown, limits: PathLimits): string | null {
  if (typeof path !== "string" || path.length === 0) return "path must be a non-empty string";
  if (path.includes("\0")) return "path contains a NUL byte";
  if (path.startsWith("/")) return "absolute paths are not allowed";
  const segments = path.split("/");
  for (const s of segments) {
    if (s === "") return "path has an empty segment";
    if (s === "." || s === "..") return `path segment '${s}' is not allowed`;
  }
  if (Buffer.byteLength(path) > limits.maxPathBytes) return `path is longer than ${limits.maxPathBytes} bytes`;
  if (segments.length > limits.maxDepth) return `path is deeper than ${limits.maxDepth} levels`;
  return null;
}

/** Every proper ancestor of a logical path, shallowest first: `a/b/c` gives `a`, `a/b`. */
export function ancestors(path: string): string[] {
  const parts = path.split("/");
  const out: string[] = [];
  for (let i = 1; i < parts.length; i++) out.push(parts.slice(0, i).join("/"));
  return out;
}

/**
 * Resolves where a symlink at `linkPath` with `target` ends up, following the
 * tree's other symlinks the way the kernel would, and reports whether it stays
 * inside the root. A purely lexical check is not enough: with `s1 -> .` a link
 * `s2 -> s1/..` normalizes to `.` but really points at the root's parent.
 */
export function symlinkStaysInside(linkPath: string, target: string, links: ReadonlyMap<string, string>): boolean {
  if (target.startsWith("/")) return false;
  let budget = 40; // the kernel's own ELOOP bound
  const resolve = (base: string[], rel: string): string[] | null => {
    const stack = [...base];
    for (const seg of rel.split("/")) {
      if (seg === "" || seg === ".") continue;
      if (seg === "..") {
        if (stack.length === 0) return null;
        stack.pop();
        continue;
      }
      stack.push(seg);
      const link = links.get(stack.join("/"));
      if (link === undefined) continue;
      if (--budget < 0 || link.startsWith("/")) return null;
      stack.pop();
      const next = resolve(stack, link);
      if (next === null) return null;
      stack.length = 0;
      stack.push(...next);
    }
    return stack;
  };
  const dir = posix.dirname(linkPath);
  return resolve(dir === "." ? [] : dir.split("/"), target) !== null;
}
