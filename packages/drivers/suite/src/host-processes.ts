/**
 * Every process on the host as the driver suite's process probes see it:
 * argv and environment read from /proc. Containers and bwrap sandboxes share
 * the host kernel, so their processes appear here too; complete only when
 * run as root (other users' environ is unreadable).
 *
 * Plain node:fs, no vitest: importable from any test support module.
 */
import { readdir, readFile } from "node:fs/promises";

export interface HostProcessView {
  pid: number;
  /** argv joined with spaces. */
  argv: string;
  /** `KEY=value` entries joined with newlines; empty when unreadable (kernel threads, zombies, other users). */
  environ: string;
}

/** Every live process on the host, with argv and environment. */
export async function hostProcesses(): Promise<HostProcessView[]> {
  const out: HostProcessView[] = [];
  for (const name of await readdir("/proc")) {
    if (!/^\d+$/.test(name)) continue;
    // A process may exit between readdir and the reads: it then shows with empty argv/environ.
    const argv = await readFile(`/proc/${name}/cmdline`, "utf8").catch(() => "");
    const environ = await readFile(`/proc/${name}/environ`, "utf8").catch(() => "");
    out.push({ pid: Number(name), argv: argv.split("\0").join(" ").trim(), environ: environ.split("\0").join("\n") });
  }
  return out;
}
