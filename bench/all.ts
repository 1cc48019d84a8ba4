/**
 * Every benchmark, one after another, and one table of their targets:
 *
 *   npm run bench                          # all of them, each with its own defaults
 *   npm run bench -- checkpoint events     # only these (names below; `events` is events-sse)
 *   npm run bench -- --quick               # each with the smaller sizes in BENCHES[].quick (said in the table's header)
 *   npm run bench -- --logs /tmp/bench     # each bench's full output to <dir>/<name>.log instead of stderr
 *
 * Each bench runs as its own child process with the Node running this file (`node --import tsx`, as the
 * `bench:*` scripts and the test servers do), one at a time so none measures another's load. Its stdout
 * and stderr stream to this process's stderr (or to its log file), and its stdout is scanned for the
 * `@@bench` lines of bench/report.ts. stdout gets only the table: the machine (CPU model, cores), the Node
 * version, the load average at start and end, then one row per reported target (bench, metric, target,
 * measured, pass/fail). A bench that exits non-zero, is killed by its timeout (env BENCH_TIMEOUT_MIN,
 * default 45, per bench), or is missing gets a failed row with its exit code or reason, so no bench is
 * ever silently absent; its targets printed before it failed are kept. A bench that exits 0 but reports
 * no target gets a "no target reported" row. A target of "none ..." is a measurement a bench records
 * without a target of any issue (pass column "-"), so the table still shows its headline ratio.
 *
 * Exit code: 0 when every selected bench ran to completion (exit 0), whether or not its targets were met
 * (a missed target is a result, reported in the table, not a crash); 1 when any bench crashed, timed out
 * or was missing; 2 for an unknown bench name.
 */
import { spawn } from "node:child_process";
import { createWriteStream, existsSync, mkdirSync } from "node:fs";
import { cpus, loadavg } from "node:os";
import { join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { type BenchTargetResult, parseBenchLines } from "./report.ts";

const BENCH_DIR = fileURLToPath(new URL(".", import.meta.url));
const REPO_ROOT = join(BENCH_DIR, "..");

export interface Bench {
  /** What to select it by on the command line. */
  name: string;
  file: string;
  /** Arguments and environment for `--quick`: the bench's own size knobs, smaller. */
  quick: { args: string[]; env?: Record<string, string> };
}

/** Cheapest first, so a short run tells most; `load` last (the longest). */
export const BENCHES: Bench[] = [
  { name: "sqlite-drivers", file: "sqlite-drivers.ts", quick: { args: ["--rounds", "3"] } },
  { name: "bwrap-primitive", file: "bwrap-primitive.ts", quick: { args: ["10"] } },
  { name: "docker-primitive", file: "docker-primitive.ts", quick: { args: ["5"] } },
  { name: "events", file: "events-sse.ts", quick: { args: ["1000", "100"] } },
  { name: "events-fanout", file: "events-fanout.ts", quick: { args: ["50"] } },
  { name: "first-tool-use", file: "first-tool-use.ts", quick: { args: ["20"] } },
  { name: "ops-overhead", file: "ops-overhead.ts", quick: { args: ["150"] } },
  { name: "transfers", file: "transfers.ts", quick: { args: ["100", "4"] } },
  { name: "egress", file: "egress.ts", quick: { args: ["5"], env: { BENCH_WARMUP: "1" } } },
  { name: "checkpoint", file: "checkpoint.ts", quick: { args: [], env: { BENCH_SIZES: "10,100" } } },
  { name: "session-first-exec", file: "session-first-exec.ts", quick: { args: ["8"], env: { BENCH_WARMUP: "2" } } },
  { name: "ama-worker-first-exec", file: "ama-worker-first-exec.ts", quick: { args: ["5"], env: { BENCH_WARMUP: "1" } } },
  { name: "warm-pool", file: "warm-pool.ts", quick: { args: ["5"], env: { BENCH_WARMUP: "1" } } },
  { name: "cloud-first-exec", file: "cloud-first-exec.ts", quick: { args: ["3"], env: { BENCH_WARMUP: "1" } } },
  { name: "acp-agents", file: "acp-agents.ts", quick: { args: ["2"] } },
  { name: "load", file: "load.ts", quick: { args: [] } },
];

/** One table row: a reported target, or a bench that did not finish. */
export interface Row extends BenchTargetResult {
  /** Set when the row stands for a failed run rather than a measured target. */
  failure?: string;
}

interface Options {
  names: string[];
  quick: boolean;
  logs: string | null;
}

function parseArgs(argv: string[]): Options {
  const options: Options = { names: [], quick: false, logs: null };
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i] as string;
    if (arg === "--quick") options.quick = true;
    else if (arg === "--logs") options.logs = argv[++i] ?? null;
    else options.names.push(arg);
  }
  return options;
}

const loadAverage = () =>
  loadavg()
    .map((x) => x.toFixed(2))
    .join(" / ");

export interface RunOptions {
  /** Where the bench files are (bench/ itself but in tests). */
  dir: string;
  quick: boolean;
  /** Where the bench's stdout and stderr go. */
  sink: NodeJS.WritableStream;
  timeoutMs: number;
}

/**
 * Runs one bench to its end; its output streams to `sink`, its stdout is kept for the `@@bench` lines.
 * `failure` is null when it exited 0, else why not; the rows then end with one failed row saying so.
 */
export function runBench(bench: Bench, options: RunOptions): Promise<{ rows: Row[]; failure: string | null }> {
  const { quick, sink, timeoutMs } = options;
  const path = join(options.dir, bench.file);
  const failed = (reason: string): Row => ({
    bench: bench.name,
    metric: `(${reason})`,
    target: "runs to completion",
    measured: Number.NaN,
    unit: "",
    pass: false,
    failure: reason,
  });
  if (!existsSync(path)) return Promise.resolve({ rows: [failed(`missing: bench/${bench.file}`)], failure: "missing" });
  const args = quick ? bench.quick.args : [];
  return new Promise((resolve) => {
    const child = spawn(process.execPath, ["--import", "tsx", path, ...args], {
      cwd: REPO_ROOT,
      env: { ...process.env, ...(quick ? bench.quick.env : {}) },
      stdio: ["ignore", "pipe", "pipe"],
      // Its own process group, so a timeout ends the bench and whatever it started (servers, sandboxes' parents).
      detached: true,
    });
    // Being in its own group, the bench would not see a Ctrl-C of `npm run bench`: pass it on, then stop.
    const interrupt = () => {
      try {
        process.kill(-(child.pid as number), "SIGTERM");
      } catch {
        // already gone
      }
      process.exit(130);
    };
    process.once("SIGINT", interrupt);
    let stdout = "";
    child.stdout.on("data", (chunk: Buffer) => {
      stdout += chunk.toString();
      sink.write(chunk);
    });
    child.stderr.on("data", (chunk: Buffer) => sink.write(chunk));
    let timedOut = false;
    const timer = setTimeout(() => {
      timedOut = true;
      try {
        process.kill(-(child.pid as number), "SIGTERM");
        setTimeout(() => {
          try {
            process.kill(-(child.pid as number), "SIGKILL");
          } catch {
            // already gone
          }
        }, 30_000).unref();
      } catch {
        // already gone
      }
    }, timeoutMs);
    const finish = (reason: string | null) => {
      clearTimeout(timer);
      process.off("SIGINT", interrupt);
      const rows: Row[] = parseBenchLines(stdout);
      if (reason !== null) rows.push(failed(reason));
      else if (rows.length === 0)
        rows.push({ bench: bench.name, metric: "(ran; no target reported)", target: "none", measured: Number.NaN, unit: "", pass: true });
      resolve({ rows, failure: reason });
    };
    child.once("error", (err) => finish(`could not start: ${err.message}`));
    child.once("close", (code, signal) => {
      if (timedOut) finish(`timed out after ${timeoutMs / 60_000} min`);
      else if (code !== 0) finish(signal ? `killed by ${signal}` : `exit code ${code}`);
      else finish(null);
    });
  });
}

function formatMeasured(r: Row): string {
  if (r.failure !== undefined || Number.isNaN(r.measured)) return "-";
  // Ratios below 10 get three decimals: 1.053 against a 1.05 target must not print as a failing "1.05x".
  const size = Math.abs(r.measured);
  const digits = Number.isInteger(r.measured) || size >= 100 ? 0 : size >= 10 ? 1 : r.unit === "x" ? 3 : 2;
  return `${r.measured.toFixed(digits)}${r.unit === "x" ? "x" : r.unit ? ` ${r.unit}` : ""}`;
}

function verdict(r: Row): string {
  if (r.failure !== undefined) return "FAIL (did not finish)";
  if (r.target.startsWith("none")) return "-";
  return r.pass ? "pass" : "FAIL";
}

const cell = (s: string) => s.replaceAll("|", "\\|");

/** One markdown table row: bench, metric, target, measured, pass/fail. */
export function formatRow(r: Row): string {
  return `| ${cell(r.bench)} | ${cell(r.metric)} | ${cell(r.target)} | ${cell(formatMeasured(r))} | ${verdict(r)} |`;
}

async function main(): Promise<number> {
  const options = parseArgs(process.argv.slice(2));
  const unknown = options.names.filter((n) => !BENCHES.some((b) => b.name === n));
  if (unknown.length > 0) {
    process.stderr.write(`unknown bench: ${unknown.join(", ")}; known: ${BENCHES.map((b) => b.name).join(", ")}\n`);
    return 2;
  }
  const selected = options.names.length === 0 ? BENCHES : BENCHES.filter((b) => options.names.includes(b.name));
  const timeoutMs = Number(process.env.BENCH_TIMEOUT_MIN ?? 45) * 60_000;
  if (options.logs !== null) mkdirSync(options.logs, { recursive: true });

  const startedAt = new Date();
  const loadAtStart = loadAverage();
  const rows: Row[] = [];
  const durations = new Map<string, number>();
  let crashed = 0;
  for (const bench of selected) {
    process.stderr.write(`\n=== bench ${bench.name} (bench/${bench.file}${options.quick ? ", quick" : ""}) load ${loadAverage()} ===\n`);
    const sink = options.logs === null ? process.stderr : createWriteStream(join(options.logs, `${bench.name}.log`));
    const t0 = performance.now();
    const result = await runBench(bench, { dir: BENCH_DIR, quick: options.quick, sink, timeoutMs });
    durations.set(bench.name, (performance.now() - t0) / 1000);
    if (sink !== process.stderr) await new Promise((resolve) => (sink as ReturnType<typeof createWriteStream>).end(resolve));
    if (result.failure !== null) crashed++;
    rows.push(...result.rows);
  }

  const cpu = cpus()[0]?.model.trim() ?? "unknown CPU";
  const out: string[] = [];
  out.push(`# npm run bench  (${startedAt.toISOString()} to ${new Date().toISOString()})`);
  out.push("");
  out.push(`- machine: ${cpu}, ${cpus().length} cores`);
  out.push(`- Node ${process.version}`);
  out.push(`- load average (1 / 5 / 15 min): ${loadAtStart} at start, ${loadAverage()} at end`);
  out.push(`- mode: ${options.quick ? "--quick (each bench's smaller size, see BENCHES in bench/all.ts)" : "each bench's defaults"}`);
  out.push(`- benches: ${selected.map((b) => `${b.name} ${durations.get(b.name)?.toFixed(0) ?? "?"} s`).join(", ")}`);
  out.push("");
  out.push("| bench | metric | target | measured | pass/fail |");
  out.push("|---|---|---|---|---|");
  for (const r of rows) out.push(formatRow(r));
  const measured = rows.filter((r) => r.failure === undefined && !r.target.startsWith("none") && !Number.isNaN(r.measured));
  out.push("");
  out.push(
    `${measured.filter((r) => r.pass).length} of ${measured.length} targets met; ${crashed} of ${selected.length} benches did not finish.`,
  );
  process.stdout.write(`${out.join("\n")}\n`);
  return crashed > 0 ? 1 : 0;
}

// Run only as a script: test/bench/all.test.ts imports runBench and formatRow.
if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href) process.exitCode = await main();
