/**
 * Loaded into a child server with `NODE_OPTIONS=--import <this file>`: samples
 * the process's memory every few milliseconds and keeps the peaks in the JSON
 * file named by OPENMA_TEST_MEMORY_PROBE (written on each new peak). SIGUSR2
 * resets the peaks to the current values, so a test can measure one phase.
 * Test support only: never part of a served process otherwise.
 */
import { writeFileSync } from "node:fs";

const file = process.env.OPENMA_TEST_MEMORY_PROBE;
if (file) {
  const current = () => {
    const m = process.memoryUsage();
    // `external` already includes every ArrayBuffer and Buffer.
    return { rss: m.rss, heapUsed: m.heapUsed, offHeap: m.external };
  };
  let peak = { ...current(), samples: 0, resets: 0 };
  const write = () => writeFileSync(file, JSON.stringify(peak));
  const sample = () => {
    const now = current();
    peak.samples++;
    let grew = false;
    for (const k of ["rss", "heapUsed", "offHeap"]) {
      if (now[k] > peak[k]) {
        peak[k] = now[k];
        grew = true;
      }
    }
    // Every 100th sample too, so a reader can tell the probe is alive and has sampled since a reset.
    if (grew || peak.samples % 100 === 0) write();
  };
  setInterval(sample, 5).unref();
  process.on("SIGUSR2", () => {
    peak = { ...current(), samples: 0, resets: peak.resets + 1 };
    write();
  });
  write();
}
