/**
 * Skill uploads → one zip per version. The upload is a set of files whose
 * names keep relative paths (`my-skill/SKILL.md`); they must share one
 * top-level directory holding `SKILL.md` (a bare `SKILL.md` at the root is
 * accepted too). `SKILL.md` starts with YAML frontmatter naming the skill
 * (`name`, a kebab-case slug) and describing it (`description`).
 *
 * The stored archive wraps everything in one directory named after `name`:
 * the worker extracts it into `skills/<name>/` and strips a single wrapper
 * directory (§3.7), so `<name>/SKILL.md` lands at `skills/<name>/SKILL.md`.
 * Hostile member names (absolute, `..`, backslashes, NUL/control characters)
 * are refused here, before anything is stored.
 */
import { zipSync } from "fflate";
import { parse as parseYaml } from "yaml";
import { badRequest } from "./errors.ts";

export const MAX_SKILL_FILES = 1000;
export const MAX_SKILL_PATH_BYTES = 1024;
export const MAX_SKILL_NAME = 64;
export const MAX_SKILL_DESCRIPTION = 1024;
export const SKILL_NAME = /^[a-z0-9]+(?:-[a-z0-9]+)*$/;

export interface SkillUploadFile {
  path: string;
  data: Uint8Array;
}

export interface SkillBundle {
  name: string;
  description: string;
  /** The zip archive, every member under `<name>/`. */
  archive: Uint8Array;
}

const BAD_CHARS = /[\p{Cc}\p{Cs}\u2028\u2029]/u;

/** Why a member path is unsafe, or null. Paths are relative, `/`-separated, without `.`/`..`. */
export function skillPathProblem(path: string): string | null {
  if (path === "") return "must not be empty";
  if (Buffer.byteLength(path, "utf8") > MAX_SKILL_PATH_BYTES) return `must be at most ${MAX_SKILL_PATH_BYTES} bytes`;
  if (BAD_CHARS.test(path)) return "must not contain NUL or control characters";
  if (path.includes("\\")) return "must use / as the separator (backslashes are not allowed)";
  if (path.startsWith("/") || /^[A-Za-z]:/.test(path)) return "must be relative";
  const segments = path.split("/");
  if (segments.some((s) => s === "")) return "must not contain empty segments";
  if (segments.some((s) => s === "." || s === "..")) return "must not contain . or .. segments";
  return null;
}

/** Parses SKILL.md's YAML frontmatter and checks `name` and `description`. */
export function parseSkillFrontmatter(data: Uint8Array): { name: string; description: string } {
  let text: string;
  try {
    text = new TextDecoder("utf-8", { fatal: true }).decode(data);
  } catch {
    throw badRequest("SKILL.md: must be UTF-8 text");
  }
  const lines = text.replace(/^\uFEFF/, "").split(/\r?\n/);
  if (lines[0]?.trimEnd() !== "---") throw badRequest("SKILL.md: must start with YAML frontmatter (a --- line)");
  const end = lines.findIndex((line, i) => i > 0 && line.trimEnd() === "---");
  if (end < 0) throw badRequest("SKILL.md: the YAML frontmatter is not closed by a --- line");
  let front: unknown;
  try {
    front = parseYaml(lines.slice(1, end).join("\n"), { maxAliasCount: 10 });
  } catch {
    throw badRequest("SKILL.md: the frontmatter is not valid YAML");
  }
  if (!front || typeof front !== "object" || Array.isArray(front)) throw badRequest("SKILL.md: the frontmatter must be a YAML mapping");
  const { name, description } = front as Record<string, unknown>;
  if (typeof name !== "string" || !SKILL_NAME.test(name) || name.length > MAX_SKILL_NAME) {
    throw badRequest(`SKILL.md: frontmatter name must be a kebab-case slug (a-z, 0-9, -) of at most ${MAX_SKILL_NAME} characters`);
  }
  if (typeof description !== "string" || description.trim() === "") throw badRequest("SKILL.md: frontmatter description is required");
  if (description.length > MAX_SKILL_DESCRIPTION || BAD_CHARS.test(description.replace(/[\n\t]/g, " "))) {
    throw badRequest(`SKILL.md: frontmatter description must be at most ${MAX_SKILL_DESCRIPTION} characters of plain text`);
  }
  return { name, description: description.trim() };
}

/**
 * Relative paths inside the skill: the common top-level directory stripped
 * when every file lives under one that holds SKILL.md, else the paths as sent
 * when SKILL.md sits at the root.
 */
function skillRelativePaths(files: SkillUploadFile[]): SkillUploadFile[] {
  const top = files[0]?.path.split("/")[0] ?? "";
  const wrapped = files.every((f) => f.path.startsWith(`${top}/`)) && files.some((f) => f.path === `${top}/SKILL.md`);
  if (wrapped) return files.map((f) => ({ path: f.path.slice(top.length + 1), data: f.data }));
  if (files.some((f) => f.path === "SKILL.md")) return files;
  throw badRequest("files: all files must be in one top-level directory with a SKILL.md at its root");
}

/** Validates an upload and builds the version's archive. `mtime` stamps every member. */
export function buildSkillBundle(files: SkillUploadFile[], mtime: Date): SkillBundle {
  if (files.length === 0) throw badRequest("files: at least one file is required");
  if (files.length > MAX_SKILL_FILES) throw badRequest(`files: at most ${MAX_SKILL_FILES} files`);
  files.forEach((f, i) => {
    const problem = skillPathProblem(f.path);
    if (problem) throw badRequest(`files[${i}]: filename ${problem}`);
  });
  const relative = skillRelativePaths(files);
  const seen = new Set<string>();
  for (const f of relative) {
    if (seen.has(f.path)) throw badRequest(`files: duplicate path ${JSON.stringify(f.path)}`);
    seen.add(f.path);
  }
  for (const f of relative) {
    // A file and a directory of the same name cannot both exist once extracted.
    const segments = f.path.split("/");
    for (let i = 1; i < segments.length; i++) {
      const dir = segments.slice(0, i).join("/");
      if (seen.has(dir)) throw badRequest(`files: ${JSON.stringify(dir)} is both a file and a directory`);
    }
  }
  const skillMd = relative.find((f) => f.path === "SKILL.md");
  if (!skillMd) throw badRequest("files: SKILL.md is required");
  const { name, description } = parseSkillFrontmatter(skillMd.data);
  const entries: Record<string, [Uint8Array, { mtime: Date; os: number; attrs: number }]> = {};
  for (const f of relative) {
    // Unix regular files (so `unzip -Z` lists plain members); scripts with a shebang stay executable.
    const mode = f.data[0] === 0x23 && f.data[1] === 0x21 ? 0o100755 : 0o100644;
    entries[`${name}/${f.path}`] = [f.data, { mtime, os: 3, attrs: (mode << 16) >>> 0 }];
  }
  return { name, description, archive: zipSync(entries, { level: 6 }) };
}
