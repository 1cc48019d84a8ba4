import { unzipSync } from "fflate";
import { describe, expect, it } from "vitest";
import { ApiError } from "./errors.ts";
import { buildSkillBundle, parseSkillFrontmatter, skillPathProblem } from "./skill-archive.ts";

const enc = (s: string) => new TextEncoder().encode(s);
const SKILL_MD = "---\nname: pdf-tools\ndescription: Work with PDFs\n---\n# PDF tools\n";
const mtime = new Date("2026-01-01T00:00:00Z");

function refusal(fn: () => unknown): string {
  try {
    fn();
  } catch (err) {
    expect(err).toBeInstanceOf(ApiError);
    expect((err as ApiError).status).toBe(400);
    return (err as ApiError).message;
  }
  throw new Error("expected a 400");
}

describe("skill archives", () => {
  it("wraps the files in one directory named after the frontmatter name", () => {
    const bundle = buildSkillBundle(
      [
        { path: "upload-dir/SKILL.md", data: enc(SKILL_MD) },
        { path: "upload-dir/scripts/run.py", data: enc("print(1)\n") },
      ],
      mtime,
    );
    expect(bundle).toMatchObject({ name: "pdf-tools", description: "Work with PDFs" });
    const files = unzipSync(bundle.archive);
    expect(Object.keys(files).sort()).toEqual(["pdf-tools/SKILL.md", "pdf-tools/scripts/run.py"]);
    expect(new TextDecoder().decode(files["pdf-tools/SKILL.md"])).toBe(SKILL_MD);
  });

  it("accepts SKILL.md at the root when there is no wrapper directory", () => {
    const bundle = buildSkillBundle(
      [
        { path: "SKILL.md", data: enc(SKILL_MD) },
        { path: "ref/notes.md", data: enc("n") },
      ],
      mtime,
    );
    expect(Object.keys(unzipSync(bundle.archive)).sort()).toEqual(["pdf-tools/SKILL.md", "pdf-tools/ref/notes.md"]);
  });

  it("refuses hostile member paths", () => {
    for (const path of ["/etc/passwd", "a/../../b", "a\\b", "a\u0000b", "C:/x", "a//b", "./a", ""]) {
      expect(skillPathProblem(path), JSON.stringify(path)).not.toBeNull();
      expect(refusal(() => buildSkillBundle([{ path, data: enc("x") }], mtime))).toMatch(/files\[0\]/);
    }
  });

  it("requires SKILL.md in one top-level directory", () => {
    expect(refusal(() => buildSkillBundle([{ path: "a/README.md", data: enc("x") }], mtime))).toMatch(/SKILL\.md/);
    expect(
      refusal(() =>
        buildSkillBundle(
          [
            { path: "a/SKILL.md", data: enc(SKILL_MD) },
            { path: "b/other.md", data: enc("x") },
          ],
          mtime,
        ),
      ),
    ).toMatch(/one top-level directory/);
    expect(refusal(() => buildSkillBundle([], mtime))).toMatch(/at least one file/);
  });

  it("refuses duplicates and file/directory clashes", () => {
    const dup = [
      { path: "s/SKILL.md", data: enc(SKILL_MD) },
      { path: "s/SKILL.md", data: enc(SKILL_MD) },
    ];
    expect(refusal(() => buildSkillBundle(dup, mtime))).toMatch(/duplicate/);
    const clash = [
      { path: "s/SKILL.md", data: enc(SKILL_MD) },
      { path: "s/x", data: enc("1") },
      { path: "s/x/y", data: enc("2") },
    ];
    expect(refusal(() => buildSkillBundle(clash, mtime))).toMatch(/both a file and a directory/);
  });

  it("validates the frontmatter", () => {
    expect(parseSkillFrontmatter(enc("\uFEFF---\r\nname: a-1\r\ndescription: d\r\n---\r\n"))).toEqual({ name: "a-1", description: "d" });
    const bad: Record<string, RegExp> = {
      "# no frontmatter": /must start with YAML frontmatter/,
      "---\nname: x\n": /not closed/,
      "---\n: : :\n---\n": /not valid YAML|mapping|name/,
      "---\n- a\n---\n": /mapping/,
      "---\nname: Not_Kebab\ndescription: d\n---\n": /kebab-case/,
      [`---\nname: ${"a".repeat(65)}\ndescription: d\n---\n`]: /kebab-case/,
      "---\nname: ok\n---\n": /description is required/,
      "---\nname: ok\ndescription: 5\n---\n": /description is required/,
    };
    for (const [text, reason] of Object.entries(bad))
      expect(
        refusal(() => parseSkillFrontmatter(enc(text))),
        text,
      ).toMatch(reason);
    expect(refusal(() => parseSkillFrontmatter(new Uint8Array([0xff, 0xfe])))).toMatch(/UTF-8/);
  });
});
