/**
 * The test side of memory-probe.mjs: the environment that loads the probe into
 * a child process, and reading, resetting and comparing the peaks it records.
 * A bounded-memory test resets the peaks before a phase and asserts the growth
 * over that baseline once the phase is over.
 */
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { until } from "./until.ts";

const PROBE = fileURLToPath(new URL("./memory-probe.mjs", import.meta.url));

export interface MemoryPeaks {
  rss: number;
  heapUsed: number;
  offHeap: number;
  samples: number;
  resets: number;
}

export interface MemoryGrowth {
  rss: number;
  /** Heap plus off-heap (Buffers, ArrayBuffers). */
  heap: number;
}

/** The child's environment that loads the probe, writing its peaks to `file`. */
export function memoryProbeEnv(file: string): Record<string, string> {
  return { NODE_OPTIONS: `--import ${PROBE}`, OPENMA_TEST_MEMORY_PROBE: file };
}

export function growthOver(base: MemoryPeaks, now: MemoryPeaks): MemoryGrowth {
  return { rss: now.rss - base.rss, heap: now.heapUsed + now.offHeap - (base.heapUsed + base.offHeap) };
}

/** Reads the peaks of the probe writing to `file` in the process `pid` (a function: the child may not be started yet). */
export function memoryPeaks(file: string, pid: () => number) {
  const read = (): MemoryPeaks | undefined => {
    try {
      return JSON.parse(readFileSync(file, "utf8")) as MemoryPeaks;
    } catch {
      return undefined; // not written yet, or read while it was being written
    }
  };
  /** The first peaks for which `accept` holds. */
  const next = async (what: string, accept: (p: MemoryPeaks) => boolean): Promise<MemoryPeaks> => {
    let got: MemoryPeaks | undefined;
    await until(async () => {
      got = read();
      return got !== undefined && accept(got);
    }, what);
    return got as MemoryPeaks;
  };
  return {
    /** The latest peaks (waits for the probe's first write). */
    peaks: () => next("the memory probe's peaks", () => true),
    /** Resets the peaks to now and returns that baseline, as the probe recorded it. */
    async reset(): Promise<MemoryPeaks> {
      const before = (await next("the memory probe's peaks", () => true)).resets;
      process.kill(pid(), "SIGUSR2");
      return next("the memory probe to reset", (p) => p.resets > before);
    },
  };
}
