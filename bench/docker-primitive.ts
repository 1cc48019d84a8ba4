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
 *
 * The Engine API round trip is exported (`engineRoundTrip`) so other
 * benchmarks measure the same baseline (bench/session-first-exec.ts), with
 * the engine check (`openEngine`) and the clean-up of labelled containers.
 */
import { randomBytes } from "node:crypto";
import { pathToFileURL } from "node:url";
import { WORKSPACE_MOUNT_PATH } from "@openma/contract";
import {
  connectDocker,
  type EngineInfo,
  type ImageManifest,
  NodeDockerSandbox,
  probeEngine,
  readImageManifest,
} from "@openma/driver-node-docker";
import { reportRatioAtMost } from "./report.ts";

const never = new AbortController().signal;
/** Marks this benchmark's containers, so a failed run's leftovers can be found and removed. */
const LABEL = { "openma.bench": "docker-primitive" };

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

export type DockerClient = ReturnType<typeof connectDocker>;

/** The Engine API client, the engine's facts and the sandbox image manifest; throws, naming the fix, when one is missing. */
export async function openEngine(): Promise<{ docker: DockerClient; engine: EngineInfo; manifest: ImageManifest }> {
  const docker = connectDocker();
  const engine = await probeEngine(docker);
  if (!engine.ok) throw new Error(engine.message);
  const manifest = await readImageManifest();
  if (!manifest.ok) throw new Error(manifest.message);
  return { docker, engine: engine.info, manifest: manifest.manifest };
}

/** Removes every container, running or not, that carries all of `labels` (a failed run's leftovers). */
export async function removeLabelledContainers(docker: DockerClient, labels: Record<string, string>): Promise<void> {
  const filters = { label: Object.entries(labels).map(([key, value]) => `${key}=${value}`) };
  const left = await docker.listContainers({ all: true, filters });
  await Promise.all(
    left.map((c) =>
      docker
        .getContainer(c.Id)
        .remove({ force: true })
        .catch(() => {}),
    ),
  );
}

async function execTrue(container: ReturnType<DockerClient["getContainer"]>): Promise<void> {
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

/** Milliseconds of each Engine API step of one container's life, and of all four from the caller's side. */
export interface EngineRoundTrip {
  create: number;
  start: number;
  exec: number;
  remove: number;
  total: number;
}

/**
 * One container through the Engine API: create (`--network none`, init), start, exec `true` (create + start +
 * wait for exit, exit code checked), remove --force. The container is removed even when a step fails.
 */
export async function engineRoundTrip(docker: DockerClient, image: string, labels: Record<string, string>): Promise<EngineRoundTrip> {
  const create: number[] = [];
  const start: number[] = [];
  const exec: number[] = [];
  const remove: number[] = [];
  const begin = performance.now();
  const container = await timed(create, () =>
    docker.createContainer({
      name: `openma-bench-${randomBytes(6).toString("hex")}`,
      Image: image,
      Cmd: ["/bin/sh", "-c", "while :; do sleep 86400; done"],
      Labels: labels,
      NetworkDisabled: true,
      HostConfig: { NetworkMode: "none", Init: true },
    }),
  );
  try {
    await timed(start, () => container.start());
    await timed(exec, () => execTrue(container));
  } catch (err) {
    await container.remove({ force: true }).catch(() => {});
    throw err;
  }
  await timed(remove, () => container.remove({ force: true }));
  return { create: create[0]!, start: start[0]!, exec: exec[0]!, remove: remove[0]!, total: performance.now() - begin };
}

async function main(runs: number): Promise<void> {
  const { docker, engine, manifest } = await openEngine();
  const image = manifest.busybox.image;
  process.stdout.write(
    `Docker ${engine.serverVersion} (API ${engine.apiVersion}, storage ${engine.storageDriver}, cgroup v${engine.cgroupVersion}), image ${image}, ${runs} runs\n\n`,
  );

  const phases = { create: [] as number[], start: [] as number[], exec: [] as number[], remove: [] as number[], total: [] as number[] };
  for (let i = 0; i < runs + 1; i++) {
    const round = await engineRoundTrip(docker, image, LABEL);
    if (i === 0) continue; // warm-up: the first run pays image and cache loading
    for (const key of Object.keys(round) as Array<keyof EngineRoundTrip>) phases[key].push(round[key]);
  }
  process.stdout.write("Engine API primitive (dockerode)\n");
  for (const [name, samples] of Object.entries(phases)) process.stdout.write(`  ${name.padEnd(22)} ${stats(samples)}\n`);

  const driver = new NodeDockerSandbox({ image, docker, labels: LABEL });
  const drv = { acquire: [] as number[], "first exec": [] as number[], terminate: [] as number[], total: [] as number[] };
  try {
    for (let i = 0; i < runs + 1; i++) {
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
    await removeLabelledContainers(docker, LABEL);
  }
  process.stdout.write("\nnode-docker driver (same work: acquire, first tool exec, terminate)\n");
  for (const [name, samples] of Object.entries(drv)) process.stdout.write(`  ${name.padEnd(22)} ${stats(samples)}\n`);
  const ratio =
    (drv.total.sort((a, b) => a - b)[Math.floor(drv.total.length / 2)] as number) /
    (phases.total.sort((a, b) => a - b)[Math.floor(phases.total.length / 2)] as number);
  process.stdout.write(`\ndriver / primitive (median totals): ${ratio.toFixed(2)}x\n`);
  // Issue 16 target 4 (Docker <= 1.2x) is for a whole session; the driver's own share has to fit inside it.
  reportRatioAtMost("docker-primitive", "node-docker acquire + exec + terminate vs Engine API (median totals)", ratio, 1.2);
}

// Run only as a script: bench/session-first-exec.ts imports the round trip.
if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href) {
  main(Math.max(1, Math.min(1000, Number(process.argv[2] ?? 10) || 10))).catch((err: Error) => {
    process.stderr.write(`docker-primitive: ${err.message}\n`);
    process.exit(1);
  });
}
