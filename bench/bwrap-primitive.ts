/**
 * bubblewrap driver overhead: `npx tsx bench/bwrap-primitive.ts [runs=20]`.
 *
 * Measures, in the same run:
 *   raw primitive   `bwrap … true` with the flags of the reference experiment
 *                   (read-only /usr, /proc, /dev, private /tmp, a bound
 *                   /workspace, no network, new pid/ipc/uts namespaces)
 *   cold            driver acquire + first exec `true` (what a new session
 *                   pays before its first tool result)
 *   warm exec       exec `true` in a running sandbox (every later tool call)
 *   terminate       hard kill of the sandbox and removal of its records
 * and prints medians (min–max) in ms and the cold/raw ratio. Needs root and
 * bwrap (`npm run provision`).
 */
import { spawn } from "node:child_process";
import { chmod, mkdir, mkdtemp, rm } from "node:fs/promises";
import { cpus, tmpdir } from "node:os";
import { join } from "node:path";
import { BubblewrapSandbox } from "@openma/driver-bubblewrap";

const RUNS = Math.max(3, Math.min(1000, Number(process.argv[2] ?? 20)));
const never = new AbortController().signal;

function run(file: string, args: string[]): Promise<number> {
  const started = performance.now();
  return new Promise((resolve, reject) => {
    const child = spawn(file, args, { stdio: "ignore" });
    child.once("error", reject);
    child.once("exit", (code) => (code === 0 ? resolve(performance.now() - started) : reject(new Error(`${file} exited ${code}`))));
  });
}

function stats(samples: number[]): { median: number; min: number; max: number } {
  const sorted = [...samples].sort((a, b) => a - b);
  return { median: sorted[Math.floor(sorted.length / 2)] as number, min: sorted[0] as number, max: sorted[sorted.length - 1] as number };
}

const fmt = (s: { median: number; min: number; max: number }) => `${s.median.toFixed(1)} ms (${s.min.toFixed(1)}–${s.max.toFixed(1)})`;

async function main(): Promise<void> {
  const root = await mkdtemp(join(tmpdir(), "openma-bwrap-bench-"));
  await chmod(root, 0o755);
  const ws = join(root, "ws");
  await mkdir(ws);
  await mkdir(join(root, "tmp"));
  const raw = [
    "--ro-bind",
    "/usr",
    "/usr",
    "--symlink",
    "usr/bin",
    "/bin",
    "--symlink",
    "usr/lib",
    "/lib",
    "--symlink",
    "usr/lib64",
    "/lib64",
    "--proc",
    "/proc",
    "--dev",
    "/dev",
    "--bind",
    join(root, "tmp"),
    "/tmp",
    "--bind",
    ws,
    "/workspace",
    "--chdir",
    "/workspace",
    "--unshare-net",
    "--unshare-pid",
    "--unshare-ipc",
    "--unshare-uts",
    "--die-with-parent",
    "--new-session",
    "true",
  ]; // prettier-ignore
  const driver = new BubblewrapSandbox({ stateRoot: join(root, "state") });
  try {
    await run("bwrap", raw); // warm-up: page cache, dynamic linker
    const primitive: number[] = [];
    for (let i = 0; i < RUNS; i++) primitive.push(await run("bwrap", raw));

    const cold: number[] = [];
    const warm: number[] = [];
    const kill: number[] = [];
    for (let i = 0; i < RUNS; i++) {
      const scope = { environmentId: "env_bench", sessionId: `sess_${i}` };
      const fence = { scope, ownerId: "bench", generation: 1, expiresAt: Date.now() + 60_000 };
      const started = performance.now();
      const acquired = await driver.acquire({
        scope,
        fence,
        plan: {
          provider: "bubblewrap",
          driver: { type: "ama_worker", process: { command: "true" } },
          workspace: { requirement: "ephemeral", strategy: "ephemeral", durability: "none" },
          outputs: null,
          runtimeCheckpoint: null,
        },
        workspace: { bindingId: "ws", strategy: "ephemeral", mountPath: "/workspace", metadata: { hostPath: ws } },
        outputs: null,
        idempotencyKey: `bench-${i}`,
        signal: never,
      });
      if (acquired.type !== "acquired") throw new Error(`acquire failed: ${acquired.reason}`);
      const tools = driver.toolSandbox(acquired.lease);
      const first = await tools.exec({ command: ["true"], timeoutMs: 30_000, signal: never });
      if (first.type !== "exited" || first.exitCode !== 0) throw new Error(`first exec: ${JSON.stringify(first)}`);
      cold.push(performance.now() - started);
      for (let j = 0; j < 3; j++) {
        const t = performance.now();
        await tools.exec({ command: ["true"], timeoutMs: 30_000, signal: never });
        warm.push(performance.now() - t);
      }
      const t = performance.now();
      const ended = await driver.terminate({ scope, fence, lease: acquired.lease, reason: "completed", signal: never });
      if (ended.type !== "terminated") throw new Error(`terminate: ${ended.error}`);
      kill.push(performance.now() - t);
    }
    const p = stats(primitive);
    const c = stats(cold);
    console.log(
      `# bubblewrap driver vs raw bwrap  (${new Date().toISOString()}, node ${process.version}, ${cpus().length} cpus, runs=${RUNS})`,
    );
    console.log(`raw bwrap … true            ${fmt(p)}`);
    console.log(`acquire + first exec true   ${fmt(c)}   ratio ${(c.median / p.median).toFixed(1)}x raw`);
    console.log(`warm exec true              ${fmt(stats(warm))}   ratio ${(stats(warm).median / p.median).toFixed(1)}x raw`);
    console.log(`terminate                   ${fmt(stats(kill))}`);
    console.log(
      `limits enforced by: ${driver.enforcement.mechanism}; seccomp: ${driver.capabilities.facts.has.includes("seccomp_syscall_denylist")}`,
    );
  } finally {
    await driver.shutdown();
    await rm(root, { recursive: true, force: true });
  }
}

await main();
