/** The six sandbox tools (§7 behaviour) on the real subprocess driver. */
import { mkdirSync, readFileSync, symlinkSync, utimesSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import type { ToolSandboxPort } from "@openma/contract";
import { SubprocessSandboxDriver } from "@openma/driver-subprocess";
import { runSandboxTool } from "@openma/harness";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { globToRegExp } from "../../packages/harness/src/toolset/search.ts";

let driver: SubprocessSandboxDriver;
let port: ToolSandboxPort;
let n = 0;

beforeAll(() => {
  driver = new SubprocessSandboxDriver();
});
afterAll(async () => driver.close());

/** A fresh workspace per test. */
function workspace(): string {
  n += 1;
  port = driver.portFor(`sesn_tools_${n}`);
  return port.workdir;
}

const run = (name: string, input: unknown) => runSandboxTool(port, name, input, new AbortController().signal);
const okText = (text: string) => ({ text, isError: false });
const errText = (text: string) => ({ text, isError: true });

describe("bash", () => {
  it("merges stdout and stderr in order, strips ANSI escapes and trailing newlines", async () => {
    workspace();
    expect(await run("bash", { command: "echo one; echo two >&2; printf '\\033[31mred\\033[0m\\n\\n\\n'" })).toEqual(
      okText("one\ntwo\nred"),
    );
  });

  it("reports a non-zero exit as an error with the output, or `exit N`", async () => {
    workspace();
    expect(await run("bash", { command: "echo bad; false" })).toEqual(errText("bad"));
    expect(await run("bash", { command: "(exit 7)" })).toEqual(errText("exit 7"));
  });

  it("keeps one shell per sandbox: the working directory, variables and background jobs survive between calls", async () => {
    const dir = workspace();
    expect(await run("bash", { command: "pwd; cd /tmp && export X=1; Y=2" })).toEqual(okText(dir));
    expect(await run("bash", { command: 'pwd; echo $X; echo "y=$Y"' })).toEqual(okText("/tmp\n1\ny=2"));
    expect(await run("bash", { command: "cd - >/dev/null; sleep 300 & echo $! > job.pid; pwd" })).toEqual(okText(dir));
    expect(await run("bash", { command: 'kill -0 "$(cat job.pid)" && jobs | grep -c "sleep 300"' })).toEqual(okText("1"));
  });

  it("kills a timed-out command and keeps the shell, its state and its background jobs", async () => {
    workspace();
    await run("bash", { command: "cd /tmp && export X=1; (sleep 300) & { sleep 300; } & echo started" });
    const r = await run("bash", { command: "echo before; sleep 1000; echo after", timeout_ms: 300 });
    expect(r.isError).toBe(true);
    expect(r.text).toMatch(
      /^bash: command timed out after 300 ms \(the command was killed; the shell, its working directory and variables are kept\)\nbefore/,
    );
    expect(r.text).not.toContain("\nafter");
    // A loop of builtins, which no child kill can stop, is returned from as well.
    const loop = await run("bash", { command: "while :; do :; done", timeout_ms: 300 });
    expect(loop.text).toMatch(/^bash: command timed out after 300 ms \(the command was killed;/);
    expect(await run("bash", { command: "cd /tmp; echo $X; jobs | grep -c 'sleep 300'" })).toEqual(okText("1\n2"));
  });

  it("restarts the shell on request, and in place after `exit`, and says so", async () => {
    const dir = workspace();
    await run("bash", { command: "cd /tmp; export X=1" });
    expect(await run("bash", { restart: true })).toEqual(okText("the shell was restarted"));
    expect(await run("bash", { command: 'pwd; echo "x=$X"' })).toEqual(okText(`${dir}\nx=`));
    const exited =
      "[bash: the command ran `exit`, so the shell was restarted in place: the working directory, exported variables and " +
      "background processes are kept; other variables and functions are not]";
    expect(await run("bash", { command: "cd /tmp; export X=1; Y=2; echo bye; exit 3; echo never" })).toEqual(errText(`bye\n${exited}`));
    expect(await run("bash", { command: 'pwd; echo "x=$X y=$Y"' })).toEqual(okText("/tmp\nx=1 y="));
    expect(await run("bash", { command: "exit" })).toEqual(okText(exited));
    // `set -e` ends the shell the same way.
    expect(await run("bash", { command: "set -e; false; echo never" })).toEqual(errText(`exit 1\n${exited}`));
    expect(await run("bash", { command: "echo still here" })).toEqual(okText("still here"));
    expect(await run("bash", { restart: true, command: "pwd" })).toEqual(okText(`[bash: the shell was restarted]\n${dir}`));
  });

  it("reports a shell that died and starts a new one", async () => {
    const dir = workspace();
    expect(await run("bash", { command: "echo dying; kill -KILL $$" })).toEqual(
      errText("dying\nbash: the shell ended (exit -1 (SIGKILL)); the next call starts a new one"),
    );
    expect(await run("bash", { command: "pwd" })).toEqual(
      okText(
        `[bash: a new shell was started: the previous shell ended; it starts in the workspace directory, without earlier variables or background jobs]\n${dir}`,
      ),
    );
  });

  it("reports a fresh shell after the sandbox was replaced", async () => {
    n += 1;
    const id = `sesn_tools_${n}`;
    port = driver.portFor(id);
    await run("bash", { command: "cd /tmp; export X=1" });
    driver.replace(id);
    port = driver.portFor(id);
    const r = await runSandboxTool(port, "bash", { command: 'pwd; echo "x=$X"' }, new AbortController().signal, { priorBashCalls: true });
    expect(r).toEqual(
      okText(
        "[bash: a new shell was started: the previous shell is gone (the sandbox was replaced or the server restarted); " +
          `it starts in the workspace directory, without earlier variables or background jobs]\n${port.workdir}\nx=`,
      ),
    );
  });

  it("keeps the last 100 KiB of output", async () => {
    workspace();
    const r = await run("bash", { command: "head -c 300000 /dev/zero | tr '\\0' a; echo; echo END" });
    expect(r.isError).toBe(false);
    expect(r.text.startsWith("[output truncated]\n")).toBe(true);
    expect(r.text.endsWith("a\nEND")).toBe(true);
    expect(Buffer.byteLength(r.text)).toBeLessThanOrEqual(100 * 1024 + 32);
  });

  it("times out (timeout_ms 0 is an immediate timeout), validates input, and accepts restart", async () => {
    workspace();
    const r = await run("bash", { command: "echo before; sleep 30", timeout_ms: 200 });
    expect(r.isError).toBe(true);
    expect(r.text).toMatch(/^bash: command timed out after 200 ms/);
    expect((await run("bash", { command: "echo hi", timeout_ms: 0 })).text).toMatch(/timed out after 0 ms/);
    expect(await run("bash", {})).toEqual(errText("bash: command is required"));
    expect(await run("bash", { command: "x", timeout_ms: -1 })).toEqual(errText("bash: timeout_ms must be a non-negative integer"));
    expect(await run("bash", { restart: true })).toEqual(okText("the shell was restarted"));
  });
});

describe("read, write, edit", () => {
  it("writes (creating parents) and reads back raw text", async () => {
    const dir = workspace();
    expect(await run("write", { file_path: "deep/dir/f.txt", content: "héllo\n" })).toEqual(okText("wrote 7 bytes to deep/dir/f.txt"));
    expect(readFileSync(join(dir, "deep/dir/f.txt"), "utf8")).toBe("héllo\n");
    expect(await run("read", { file_path: join(dir, "deep/dir/f.txt") })).toEqual(okText("héllo\n"));
    expect(await run("write", { file_path: "empty.txt", content: "" })).toEqual(okText("wrote 0 bytes to empty.txt"));
  });

  it("reads a line range; large files need one", async () => {
    const dir = workspace();
    writeFileSync(join(dir, "lines.txt"), "1\n2\n3\n4\n5\n");
    expect(await run("read", { file_path: "lines.txt", view_range: [2, 3] })).toEqual(okText("2\n3"));
    expect(await run("read", { file_path: "lines.txt", view_range: [4, -1] })).toEqual(okText("4\n5\n"));
    expect(await run("read", { file_path: "lines.txt", view_range: [2] })).toEqual(
      errText("read: view_range must be [start_line, end_line]"),
    );
    writeFileSync(join(dir, "big.txt"), `${"x".repeat(300_000)}\nlast line\n`);
    const big = await run("read", { file_path: "big.txt" });
    expect(big).toEqual(errText("read: big.txt is 300011 bytes, exceeds 262144-byte limit. Read it in parts with view_range."));
    expect(await run("read", { file_path: "big.txt", view_range: [2, 2] })).toEqual(okText("last line"));
    expect((await run("read", { file_path: "big.txt", view_range: [1, 1] })).text).toMatch(/exceeds 262144-byte limit/);
  });

  it("reports missing files, directories and missing fields as errors", async () => {
    workspace();
    mkdirSync(join(port.workdir, "d"));
    expect(await run("read", { file_path: "nope.txt" })).toEqual(errText("read: nope.txt: no such file"));
    expect(await run("read", { file_path: "d" })).toEqual(errText("read: d is not a regular file"));
    expect(await run("read", {})).toEqual(errText("read: file_path is required"));
    expect(await run("write", { file_path: "x" })).toEqual(errText("write: content is required"));
  });

  it("edits one unique occurrence, or all with replace_all, literally", async () => {
    const dir = workspace();
    writeFileSync(join(dir, "e.txt"), "a b a c");
    expect(await run("edit", { file_path: "e.txt", old_string: "b", new_string: "$&B" })).toEqual(
      okText("edited e.txt (1 replacement(s))"),
    );
    expect(readFileSync(join(dir, "e.txt"), "utf8")).toBe("a $&B a c");
    expect(await run("edit", { file_path: "e.txt", old_string: "a", new_string: "z" })).toEqual(
      errText("edit: old_string appears 2 times in e.txt (must be unique)"),
    );
    expect(await run("edit", { file_path: "e.txt", old_string: "a", new_string: "z", replace_all: true })).toEqual(
      okText("edited e.txt (2 replacement(s))"),
    );
    expect(readFileSync(join(dir, "e.txt"), "utf8")).toBe("z $&B z c");
    expect(await run("edit", { file_path: "e.txt", old_string: "q", new_string: "z" })).toEqual(
      errText("edit: old_string not found in e.txt"),
    );
    expect(await run("edit", { file_path: "e.txt", old_string: "", new_string: "z" })).toEqual(errText("edit: old_string is required"));
  });

  it("confines paths to the workspace, symlinks included", async () => {
    const dir = workspace();
    const outside = `path "/etc/passwd" is outside the session's working directory`;
    expect(await run("read", { file_path: "/etc/passwd" })).toEqual(errText(`read: ${outside}`));
    expect((await run("write", { file_path: "../escape.txt", content: "x" })).text).toMatch(/^write: path "..\/escape.txt" is outside/);
    symlinkSync("/etc", join(dir, "etc-link"));
    expect((await run("read", { file_path: "etc-link/passwd" })).text).toMatch(/^read: path "etc-link\/passwd" is outside/);
    expect((await run("edit", { file_path: "etc-link/hosts", old_string: "a", new_string: "b" })).text).toMatch(/is outside/);
    expect((await run("grep", { pattern: "root", path: "etc-link" })).text).toMatch(/is outside/);
    expect((await run("glob", { pattern: "*", path: "/" })).text).toMatch(/is outside/);
  });
});

describe("glob and grep", () => {
  it("glob matches relative patterns newest first and skips .git and node_modules", async () => {
    const dir = workspace();
    for (const f of ["a.ts", "src/b.ts", "src/deep/c.ts", "src/d.js", ".git/e.ts", "node_modules/f.ts"]) {
      mkdirSync(join(dir, f, ".."), { recursive: true });
      writeFileSync(join(dir, f), "");
    }
    const years: Record<string, number> = { "a.ts": 2020, "src/b.ts": 2021, "src/deep/c.ts": 2030, "src/d.js": 2019 };
    for (const [f, y] of Object.entries(years)) utimesSync(join(dir, f), new Date(y, 0, 1), new Date(y, 0, 1));
    expect(await run("glob", { pattern: "**/*.ts" })).toEqual(
      okText([join(dir, "src/deep/c.ts"), join(dir, "src/b.ts"), join(dir, "a.ts")].join("\n")),
    );
    expect(await run("glob", { pattern: "*.{ts,js}", path: "src" })).toEqual(
      okText([join(dir, "src/b.ts"), join(dir, "src/d.js")].join("\n")),
    );
    expect(await run("glob", { pattern: "*.py" })).toEqual(okText("no matches"));
    expect((await run("glob", { pattern: "/abs/*" })).text).toMatch(/absolute pattern not permitted/);
    expect(await run("glob", { pattern: "../*" })).toEqual(errText('glob: ".." is not permitted in the pattern'));
  });

  it("grep prints path:line:text, stops a file at NUL, skips long lines, and validates the regex", async () => {
    const dir = workspace();
    writeFileSync(join(dir, "one.txt"), "alpha\nbeta\ngamma\n");
    writeFileSync(join(dir, "bin.dat"), Buffer.concat([Buffer.from("gamma before\n"), Buffer.from([0]), Buffer.from("gamma after\n")]));
    writeFileSync(join(dir, "long.txt"), `${"gamma".repeat(500)}\n`);
    mkdirSync(join(dir, "node_modules"));
    writeFileSync(join(dir, "node_modules/x.txt"), "gamma\n");
    expect(await run("grep", { pattern: "gam+a" })).toEqual(
      okText([`${join(dir, "bin.dat")}:1:gamma before`, `${join(dir, "one.txt")}:3:gamma`].join("\n")),
    );
    expect(await run("grep", { pattern: "^b", path: "one.txt" })).toEqual(okText(`${join(dir, "one.txt")}:2:beta`));
    expect(await run("grep", { pattern: "zzz" })).toEqual(okText("no matches"));
    expect((await run("grep", { pattern: "(" })).text).toMatch(/^grep: invalid regex/);
  });

  it("grep output is capped at 100 KiB", async () => {
    const dir = workspace();
    writeFileSync(join(dir, "many.txt"), "match this line\n".repeat(20_000));
    const r = await run("grep", { pattern: "match" });
    expect(r.text.endsWith("[output truncated at 102400 bytes]")).toBe(true);
    expect(Buffer.byteLength(r.text)).toBeLessThan(102_400 + 100);
  });

  it("globToRegExp handles *, **, ?, classes and braces", () => {
    expect(globToRegExp("*.ts").test("a.ts")).toBe(true);
    expect(globToRegExp("*.ts").test("d/a.ts")).toBe(false);
    expect(globToRegExp("**/*.ts").test("a.ts")).toBe(true);
    expect(globToRegExp("**/*.ts").test("x/y/a.ts")).toBe(true);
    expect(globToRegExp("src/**").test("src/x/y")).toBe(true);
    expect(globToRegExp("?.md").test("ab.md")).toBe(false);
    expect(globToRegExp("[!a]*.md").test("b.md")).toBe(true);
    expect(globToRegExp("[!a]*.md").test("a.md")).toBe(false);
    expect(globToRegExp("*.{js,ts}").test("x.ts")).toBe(true);
    expect(globToRegExp("a+b(c).txt").test("a+b(c).txt")).toBe(true);
  });
});
