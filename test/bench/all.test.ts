/**
 * `npm run bench` (bench/all.ts) runs each bench as a real child process; these stand-in benches show that
 * a bench's targets reach the table and that a bench which crashes, is missing, or reports nothing still
 * has a row: none is ever silently absent.
 */
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { PassThrough } from "node:stream";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type Bench, formatRow, runBench } from "../../bench/all.ts";

const line = (fields: object) => `console.log("@@bench " + ${JSON.stringify(JSON.stringify(fields))});`;
const target = { bench: "fake", metric: "ours vs the primitive", target: "<= 1.5x", measured: 2.25, unit: "x", pass: false };

let dir: string;
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "openma-bench-all-"));
  await writeFile(join(dir, "ok.ts"), `console.log("human output");\n${line(target)}\n`);
  await writeFile(join(dir, "crash.ts"), `${line({ ...target, pass: true, measured: 1.1 })}\nprocess.exit(3);\n`);
  await writeFile(join(dir, "silent.ts"), `console.log("no machine-readable line");\n`);
  // The metric is the child's own argv, so the test sees what the bench was given.
  await writeFile(
    join(dir, "args.ts"),
    `console.log("@@bench " + JSON.stringify({ ...${JSON.stringify(target)}, metric: process.argv.slice(2).join(" ") }));\n`,
  );
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

function run(file: string, quick = false, args: string[] = []) {
  const bench: Bench = { name: file.replace(/\.ts$/, ""), file, quick: { args } };
  const sink = new PassThrough();
  let output = "";
  sink.on("data", (chunk: Buffer) => {
    output += chunk.toString();
  });
  return runBench(bench, { dir, quick, sink, timeoutMs: 60_000 }).then((result) => ({ ...result, output }));
}

describe("bench/all.ts runBench", () => {
  it("gathers a bench's target lines into rows and streams its output to the sink", async () => {
    const { rows, failure, output } = await run("ok.ts");
    expect(failure).toBeNull();
    expect(rows).toEqual([target]);
    expect(output).toContain("human output");
    expect(formatRow(rows[0] as (typeof rows)[0])).toBe("| fake | ours vs the primitive | <= 1.5x | 2.250x | FAIL |");
  });

  it("keeps the targets a crashed bench printed and adds a failed row with its exit code", async () => {
    const { rows, failure } = await run("crash.ts");
    expect(failure).toBe("exit code 3");
    expect(rows).toHaveLength(2);
    expect(formatRow(rows[0] as (typeof rows)[0])).toContain("| pass |");
    expect(rows[1]).toMatchObject({ bench: "crash", pass: false, failure: "exit code 3" });
    expect(formatRow(rows[1] as (typeof rows)[0])).toBe("| crash | (exit code 3) | runs to completion | - | FAIL (did not finish) |");
  });

  it("shows a missing bench as a failed row", async () => {
    const { rows, failure } = await run("load.ts");
    expect(failure).toBe("missing");
    expect(rows).toEqual([expect.objectContaining({ bench: "load", pass: false, failure: "missing: bench/load.ts" })]);
  });

  it("shows a bench that ran but reported no target, without a verdict", async () => {
    const { rows, failure } = await run("silent.ts");
    expect(failure).toBeNull();
    expect(formatRow(rows[0] as (typeof rows)[0])).toBe("| silent | (ran; no target reported) | none | - | - |");
  });

  it("passes the quick arguments only in quick mode", async () => {
    expect((await run("args.ts", true, ["5", "--rounds", "3"])).rows[0]?.metric).toBe("5 --rounds 3");
    expect((await run("args.ts", false, ["5"])).rows[0]?.metric).toBe("");
  });
});
