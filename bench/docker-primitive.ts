/**
 * Docker primitive latency: `npx tsx bench/docker-primitive.ts [runs=10]`.
 *
 * The floor any Docker-backed sandbox pays, measured through the Engine API
 * (dockerode over /var/run/docker.sock, the same client the node-docker
 * driver uses): create, start, exec `true` (create + start + wait for exit),
 * remove --force, on the busybox sandbox image with `--network none`. For
 * comparison the same run also times the node-docker driver doing the same
 * work (acquire, first exec through the tool port, terminate), so the
 * driver's own overhead is visible. Prints the median and min/max in ms.
 *
 * Needs a running dockerd and the images: `npm run provision`.
 */
import { randomBytes } from "node:crypto";
import { WORKSPACE_MOUNT_PATH } from "@openma/contract";
import { connectDocker, NodeDockerSandbox, probeEngine, readImageManifest } from "@openma/driver-node-docker";

const RUNS = Math.max(1, Math.min(1000, Number(process.argv[2] ?? 10) || 10));
const never = new AbortController().signal;

function stats(samples: number[]): string {
  const sorted = [...samples].sort((a, b) => a - b);
  const median = sorted[Math.floor(sorted.length / 2)] as number;
  return `median ${median.toFixed(1).padStart(7)} ms   min ${(sorted[0] as number).toFixed(1).padStart(7)}   max ${(sorted.at(-1) as number).toFixed(1).padStart(7)}`;
}

async function timed<T>(samples: number[], fn: () => Promise<T>): Promise<T> {
  const start = performance.now();
  const value = await fn();
  samples.push(performance.now() - start);
  return value;
}

async function execTrue(container: ReturnType<ReturnType<typeof connectDocker>["getContainer"]>): Promise<void> {
  const exec = await container.exec({ Cmd: ["true"], AttachStdout: true, AttachStderr: true });
  const stream = await exec.start({});
  await new Promise<void>((resolve, reject) => {
    stream.on("error", reject);
    stream.on("end", resolve);
    stream.resume();
  });
  const info = await exec.inspect();
  if (info.ExitCode !== 0) throw new Error(`exec true exited ${info.ExitCode}`);
}

async function main(): Promise<void> {
  const docker = connectDocker();
  const engine = await probeEngine(docker);
  if (!engine.ok) throw new Error(engine.message);
  const manifest = await readImageManifest();
  if (!manifest.ok) throw new Error(manifest.message);
  const image = manifest.manifest.busybox.image;
  process.stdout.write(
    `Docker ${engine.info.serverVersion} (API ${engine.info.apiVersion}, storage ${engine.info.storageDriver}, cgroup v${engine.info.cgroupVersion}), image ${image}, ${RUNS} runs\n\n`,
  );

  const phases = { create: [] as number[], start: [] as number[], exec: [] as number[], remove: [] as number[], total: [] as number[] };
  for (let i = 0; i < RUNS + 1; i++) {
    const local = { create: [] as number[], start: [] as number[], exec: [] as number[], remove: [] as number[] };
    const begin = performance.now();
    const container = await timed(local.create, () =>
      docker.createContainer({
        name: `openma-bench-${randomBytes(6).toString("hex")}`,
        Image: image,
        Cmd: ["/bin/sh", "-c", "while :; do sleep 86400; done"],
        Labels: { "openma.bench": "docker-primitive" },
        NetworkDisabled: true,
        HostConfig: { NetworkMode: "none", Init: true },
      }),
    );
    await timed(local.start, () => container.start());
    await timed(local.exec, () => execTrue(container));
    await timed(local.remove, () => container.remove({ force: true }));
    const total = performance.now() - begin;
    if (i === 0) continue; // warm-up: the first run pays image and cache loading
    for (const key of Object.keys(local) as Array<keyof typeof local>) phases[key].push(...local[key]);
    phases.total.push(total);
  }
  process.stdout.write("Engine API primitive (dockerode)\n");
  for (const [name, samples] of Object.entries(phases)) process.stdout.write(`  ${name.padEnd(22)} ${stats(samples)}\n`);

  const driver = new NodeDockerSandbox({ image, docker, labels: { "openma.bench": "docker-primitive" } });
  const drv = { acquire: [] as number[], "first exec": [] as number[], terminate: [] as number[], total: [] as number[] };
  try {
    for (let i = 0; i < RUNS + 1; i++) {
      const id = randomBytes(6).toString("hex");
      const scope = { environmentId: `env_${id}`, sessionId: `sesn_${id}` };
      const fence = { scope, ownerId: `bench_${id}`, generation: 1, expiresAt: Date.now() + 60_000 };
      const local = { acquire: [] as number[], "first exec": [] as number[], terminate: [] as number[] };
      const begin = performance.now();
      const result = await timed(local.acquire, () =>
        driver.acquire({
          scope,
          fence,
          workspace: { bindingId: `wsb_${id}`, strategy: "ephemeral", mountPath: WORKSPACE_MOUNT_PATH },
          outputs: null,
          idempotencyKey: id,
          signal: never,
        }),
      );
      if (result.type !== "acquired") throw new Error(`acquire failed: ${result.reason}`);
      const executed = await timed(local["first exec"], () =>
        driver.toolSandbox(result.lease).exec({ command: ["true"], timeoutMs: 30_000, signal: never }),
      );
      if (executed.type !== "exited" || executed.exitCode !== 0) throw new Error(`exec failed: ${JSON.stringify(executed.type)}`);
      await timed(local.terminate, () => driver.terminate({ scope, fence, lease: result.lease, reason: "completed", signal: never }));
      const total = performance.now() - begin;
      if (i === 0) continue;
      for (const key of Object.keys(local) as Array<keyof typeof local>) drv[key].push(...local[key]);
      drv.total.push(total);
    }
  } finally {
    const left = await docker.listContainers({ all: true, filters: { label: ["openma.bench=docker-primitive"] } });
    await Promise.all(
      left.map((c) =>
        docker
          .getContainer(c.Id)
          .remove({ force: true })
          .catch(() => {}),
      ),
    );
  }
  process.stdout.write("\nnode-docker driver (same work: acquire, first tool exec, terminate)\n");
  for (const [name, samples] of Object.entries(drv)) process.stdout.write(`  ${name.padEnd(22)} ${stats(samples)}\n`);
  const ratio =
    (drv.total.sort((a, b) => a - b)[Math.floor(drv.total.length / 2)] as number) /
    (phases.total.sort((a, b) => a - b)[Math.floor(phases.total.length / 2)] as number);
  process.stdout.write(`\ndriver / primitive (median totals): ${ratio.toFixed(2)}x\n`);
}

main().catch((err: Error) => {
  process.stderr.write(`docker-primitive: ${err.message}\n`);
  process.exit(1);
});
