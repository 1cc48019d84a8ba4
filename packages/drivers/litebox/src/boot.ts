/**
 * Whether the embedded runtime can boot a micro-VM on this machine, found
 * out the only honest way: by really booting one (create a box from the
 * layout, run `/bin/true` in it) under a bound, and removing it whatever
 * happened. The answer carries the runtime's own error when it could not
 * (on a nested PVM guest: "engine reported an error: The VM failed to
 * start: ..."), so the driver suite and `openma doctor` print that and not
 * a guess. One probe per process and configuration: it costs up to the
 * runtime's own readiness wait (30 s) plus the bound's margin.
 */
import { randomBytes } from "node:crypto";
import type { Boxlite } from "@boxlite-ai/boxlite";

export type BootProbe = { booted: true; ms: number } | { booted: false; error: string; ms: number };

/** The runtime waits 30 s for a VM to become ready; the margin lets its own error arrive first. */
export const BOOT_PROBE_TIMEOUT_MS = 40_000;

const probes = new Map<string, Promise<BootProbe>>();

/** The cached probe of `key` (one per process), or a fresh one. */
export function probeBoot(key: string, runtime: () => Boxlite, rootfsPath: () => Promise<string>, timeoutMs = BOOT_PROBE_TIMEOUT_MS) {
  let probe = probes.get(key);
  if (probe === undefined) {
    probe = bootOnce(runtime, rootfsPath, timeoutMs);
    probes.set(key, probe);
  }
  return probe;
}

async function bootOnce(runtime: () => Boxlite, rootfsPath: () => Promise<string>, timeoutMs: number): Promise<BootProbe> {
  const started = performance.now();
  const ms = () => Math.round(performance.now() - started);
  const name = `openma-boot-probe-${randomBytes(6).toString("hex")}`;
  let rt: Boxlite;
  let rootfs: string;
  try {
    rt = runtime();
    // Building the layout (once per image) is not booting: it stays outside the bound.
    rootfs = await rootfsPath();
  } catch (err) {
    return { booted: false, error: messageOf(err), ms: ms() };
  }
  let timer: NodeJS.Timeout | undefined;
  const bounded = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`no VM became ready within ${timeoutMs} ms`)), timeoutMs);
    timer.unref();
  });
  let boot: Promise<void> = Promise.resolve();
  try {
    boot = (async () => {
      const box = await rt.create({ rootfsPath: rootfs, cpus: 1, memoryMib: 512, detach: false, autoStop: 0 }, name);
      const execution = await box.exec("/bin/true", [], null, false, null, null, "/");
      const result = await execution.wait();
      if (result.exitCode !== 0) throw new Error(`/bin/true exited ${result.exitCode} in the VM`);
    })();
    await Promise.race([boot, bounded]);
    return { booted: true, ms: ms() };
  } catch (err) {
    return { booted: false, error: messageOf(err), ms: ms() };
  } finally {
    clearTimeout(timer);
    // A boot still under way past the bound is removed once it settles: the probe never leaves a box.
    const remove = () => rt.remove(name, true).catch(() => {});
    await remove();
    void boot.then(remove, remove);
  }
}

const messageOf = (err: unknown) => (err instanceof Error ? err.message : String(err));
