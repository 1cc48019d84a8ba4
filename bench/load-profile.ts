/**
 * Summarizes a V8 `.cpuprofile` (what `node --cpu-prof` writes on exit) as the
 * functions with the most self time, and the share of time per package, for
 * bench/load.ts to say where a loaded server spends its CPU.
 */
import { readFile } from "node:fs/promises";

interface CpuProfileNode {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number };
  hitCount?: number;
}

interface CpuProfile {
  nodes: CpuProfileNode[];
  startTime: number;
  endTime: number;
  samples?: number[];
  /** µs between consecutive samples (the first: since startTime). */
  timeDeltas?: number[];
}

/** Replaces each node's hit count with its samples taken between `fromUs` and `toUs`. */
function windowHits(profile: CpuProfile, fromUs: number, toUs: number): void {
  const { samples, timeDeltas } = profile;
  if (!samples || !timeDeltas) throw new Error("the profile has no sample timestamps to window");
  const hits = new Map<number, number>();
  let t = profile.startTime;
  for (let i = 0; i < samples.length; i++) {
    t += timeDeltas[i] ?? 0;
    if (t < fromUs || t > toUs) continue;
    const id = samples[i] as number;
    hits.set(id, (hits.get(id) ?? 0) + 1);
  }
  for (const node of profile.nodes) node.hitCount = hits.get(node.id) ?? 0;
}

export interface SelfTimeRow {
  /** `functionName (file:line)`, or a V8 pseudo-frame such as `(garbage collector)`. */
  frame: string;
  ms: number;
  share: number;
}

export interface ProfileSummary {
  totalMs: number;
  /** Time in the process that was not idle (the `(idle)` frame excluded). */
  busyMs: number;
  top: SelfTimeRow[];
  /** Self time by where the code lives: a package under node_modules, the repo's own packages, node internals, V8. */
  byOrigin: SelfTimeRow[];
}

/** The short location of a frame: the package (node_modules/<pkg>), the repo path, or `node:` internals. */
function originOf(url: string): string {
  if (url === "") return "(V8 / native)";
  if (url.startsWith("node:")) return "node internals";
  const inModules = /node_modules\/((?:@[^/]+\/)?[^/]+)/.exec(url);
  if (inModules?.[1]) return inModules[1];
  const inRepo = /\/(packages\/(?:drivers\/|standins\/)?[^/]+|apps\/[^/]+)\//.exec(url);
  return inRepo?.[1] ?? url;
}

function shortUrl(url: string): string {
  const cut = url.search(/node_modules\/|packages\/|apps\//);
  return cut >= 0 ? url.slice(cut) : url.replace(/^file:\/\//, "");
}

export interface SummaryOptions {
  /** How many origins to list (default 10). */
  origins?: number;
  /**
   * Only the samples taken in this span of the monotonic clock, in µs (V8's
   * profile timestamps and `process.hrtime` read the same clock): a bench's
   * measured part without the process's start-up.
   */
  window?: { fromUs: number; toUs: number };
}

export async function summarizeCpuProfile(path: string, topN = 15, options: SummaryOptions = {}): Promise<ProfileSummary> {
  const profile = JSON.parse(await readFile(path, "utf8")) as CpuProfile;
  const window = options.window;
  if (window) windowHits(profile, window.fromUs, window.toUs);
  const totalMs = window
    ? (Math.min(window.toUs, profile.endTime) - Math.max(window.fromUs, profile.startTime)) / 1000
    : (profile.endTime - profile.startTime) / 1000;
  const hits = profile.nodes.reduce((n, node) => n + (node.hitCount ?? 0), 0);
  const msPerHit = hits > 0 ? totalMs / hits : 0;
  const byFrame = new Map<string, number>();
  const byOrigin = new Map<string, number>();
  let idle = 0;
  for (const node of profile.nodes) {
    const ms = (node.hitCount ?? 0) * msPerHit;
    if (ms === 0) continue;
    const { functionName, url, lineNumber } = node.callFrame;
    if (functionName === "(idle)") {
      idle += ms;
      continue;
    }
    const frame = url ? `${functionName || "(anonymous)"} (${shortUrl(url)}:${lineNumber + 1})` : functionName || "(anonymous)";
    byFrame.set(frame, (byFrame.get(frame) ?? 0) + ms);
    const origin = functionName === "(garbage collector)" ? "(garbage collector)" : originOf(url);
    byOrigin.set(origin, (byOrigin.get(origin) ?? 0) + ms);
  }
  const busyMs = totalMs - idle;
  const rows = (m: Map<string, number>, n: number) =>
    [...m.entries()]
      .sort((a, b) => b[1] - a[1])
      .slice(0, n)
      .map(([frame, ms]) => ({ frame, ms, share: busyMs > 0 ? ms / busyMs : 0 }));
  return { totalMs, busyMs, top: rows(byFrame, topN), byOrigin: rows(byOrigin, options.origins ?? 10) };
}

/** Markdown tables of a summary, for the bench's output and docs/benchmarks.md. */
export function formatProfileSummary(label: string, s: ProfileSummary): string {
  const lines = [
    `CPU profile of ${label}: ${(s.busyMs / 1000).toFixed(1)} s busy of ${(s.totalMs / 1000).toFixed(1)} s profiled (${((100 * s.busyMs) / Math.max(1, s.totalMs)).toFixed(0)}%)`,
    "",
    "| Self time by origin | ms | share of busy |",
    "|---|---|---|",
    ...s.byOrigin.map((r) => `| ${r.frame} | ${r.ms.toFixed(0)} | ${(100 * r.share).toFixed(1)}% |`),
    "",
    "| Top functions by self time | ms | share of busy |",
    "|---|---|---|",
    ...s.top.map((r) => `| \`${r.frame.replaceAll("|", "\\|")}\` | ${r.ms.toFixed(0)} | ${(100 * r.share).toFixed(1)}% |`),
  ];
  return lines.join("\n");
}
