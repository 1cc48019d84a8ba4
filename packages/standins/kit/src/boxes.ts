/**
 * The real sandboxes behind a stand-in: one Docker container per vendor
 * sandbox, through our own node-docker driver (its exec wrapper, tree kill
 * and file programs), so a command the vendor's SDK sends really runs, a
 * file it writes is really on disk, and a pause really freezes processes.
 *
 * Lifecycle verbs map onto the engine: `pause`/`unpause` (cgroup freezer:
 * memory and processes survive, E2B's pause), `stop`/`start` (processes
 * end, the writable layer stays: Daytona's stop, a cold Sprite), `destroy`
 * (force remove). Every container carries the stand-in's run label, so
 * `containers()` counts what is really left on the engine, not what the
 * stand-in believes.
 */
import { randomBytes } from "node:crypto";
import type { CredentialEgressPort, FenceIdentity, ManagedSandboxLease } from "@openma/contract";
import { connectDocker, type DockerToolSandbox, NodeDockerSandbox, readImageManifest, statusOf } from "@openma/driver-node-docker";
import type Docker from "dockerode";

export const STANDIN_LABEL = "openma.standin";
export const STANDIN_RUN_LABEL = "openma.standin.run";

export type BoxState = "running" | "paused" | "stopped";

export interface LocalBoxesOptions {
  /** Vendor name, for labels and container names. */
  vendor: string;
  /** Image every box starts from (default: the base sandbox image of `npm run provision`). */
  image?: string;
  /**
   * Docker network mode (default `host`): a cloud sandbox reaches the internet, and the official
   * worker inside it must reach the control plane at its public URL, which on this machine listens
   * on loopback.
   */
  networkMode?: string;
  /** The boxes' only way out (node-docker's egress port; needs `networkMode: "none"`). */
  credentialEgress?: CredentialEgressPort;
  docker?: Docker;
}

export class Box {
  state: BoxState = "running";
  readonly createdAt = new Date();

  constructor(
    readonly id: string,
    readonly lease: ManagedSandboxLease,
    readonly fence: FenceIdentity,
    readonly tools: DockerToolSandbox,
  ) {}
}

export class LocalBoxes {
  readonly runId = randomBytes(6).toString("hex");
  readonly #boxes = new Map<string, Box>();
  readonly #options: LocalBoxesOptions;
  #driver: Promise<NodeDockerSandbox> | null = null;
  #docker: Docker;

  constructor(options: LocalBoxesOptions) {
    this.#options = options;
    this.#docker = options.docker ?? connectDocker();
  }

  #open(): Promise<NodeDockerSandbox> {
    this.#driver ??= (async () => {
      let image = this.#options.image;
      if (image === undefined) {
        const manifest = await readImageManifest();
        if (!manifest.ok) throw new Error(manifest.message);
        image = manifest.manifest.base.image;
      }
      return new NodeDockerSandbox({
        image,
        docker: this.#docker,
        networkMode: this.#options.networkMode ?? "host",
        ...(this.#options.credentialEgress ? { credentialEgress: this.#options.credentialEgress } : {}),
        // The vendors' boxes give their users root and a writable filesystem; a stand-in behaves the same.
        user: "0:0",
        readOnlyRootfs: false,
        namePrefix: `openma-standin-${this.#options.vendor}`,
        labels: { [STANDIN_LABEL]: this.#options.vendor, [STANDIN_RUN_LABEL]: this.runId },
      });
    })();
    return this.#driver;
  }

  /**
   * A fresh running box; throws when the engine refuses (the vendor stand-in answers with its own 5xx).
   * `workspaceHostPath` bind-mounts that host directory at `/workspace` (a vendor's volume); the workspace is
   * the container's own otherwise.
   */
  async create(prefix: string, options: { workspaceHostPath?: string } = {}): Promise<Box> {
    const driver = await this.#open();
    const id = `${prefix}${randomBytes(8).toString("hex")}`;
    const scope = { environmentId: `standin-${this.#options.vendor}`, sessionId: id };
    const fence: FenceIdentity = { scope, ownerId: `standin-${this.runId}`, generation: 1, expiresAt: Date.now() + 365 * 86_400_000 };
    const acquired = await driver.acquire({
      scope,
      fence,
      workspace: {
        bindingId: id,
        strategy: options.workspaceHostPath === undefined ? "ephemeral" : "durable_mount",
        mountPath: "/workspace",
        ...(options.workspaceHostPath === undefined ? {} : { metadata: { hostPath: options.workspaceHostPath } }),
      },
      outputs: null,
      idempotencyKey: id,
      signal: AbortSignal.timeout(120_000),
    });
    if (acquired.type !== "acquired") throw new Error(`the local engine could not start a sandbox: ${acquired.reason}`);
    const box = new Box(id, acquired.lease, fence, driver.toolSandbox(acquired.lease, { workdir: "/" }));
    this.#boxes.set(id, box);
    return box;
  }

  get(id: string): Box | undefined {
    return this.#boxes.get(id);
  }

  all(): Box[] {
    return [...this.#boxes.values()];
  }

  /** Boxes the stand-in holds (any state). */
  get live(): number {
    return this.#boxes.size;
  }

  #container(box: Box): Docker.Container {
    return this.#docker.getContainer(box.lease.runtimeId);
  }

  /** Freezes every process (memory kept). */
  async pause(box: Box): Promise<void> {
    if (box.state === "paused") return;
    if (box.state === "stopped") throw new Error(`box ${box.id} is stopped`);
    await this.#container(box).pause();
    box.state = "paused";
  }

  async unpause(box: Box): Promise<void> {
    if (box.state !== "paused") return;
    await this.#container(box).unpause();
    box.state = "running";
  }

  /** Ends every process; the filesystem stays. */
  async stop(box: Box): Promise<void> {
    if (box.state === "paused") await this.unpause(box);
    if (box.state === "stopped") return;
    await this.#container(box)
      .stop({ t: 0 })
      .catch((err: unknown) => {
        if (statusOf(err) !== 304) throw err;
      });
    box.state = "stopped";
  }

  async start(box: Box): Promise<void> {
    if (box.state === "paused") return this.unpause(box);
    if (box.state === "running") return;
    await this.#container(box)
      .start()
      .catch((err: unknown) => {
        if (statusOf(err) !== 304) throw err;
      });
    box.state = "running";
  }

  /** Hard kill and removal; the box is forgotten even when the engine already lost it. */
  async destroy(box: Box): Promise<void> {
    this.#boxes.delete(box.id);
    const driver = await this.#open();
    if (box.state === "paused")
      await this.#container(box)
        .unpause()
        .catch(() => {});
    const result = await driver.terminate({
      scope: box.fence.scope,
      fence: box.fence,
      lease: box.lease,
      reason: "completed",
      signal: AbortSignal.timeout(60_000),
    });
    if (result.type === "failed") throw new Error(result.error);
  }

  /** Containers of this stand-in the engine still has, in any state: the ground truth for "nothing leaked". */
  async containers(): Promise<string[]> {
    const listed = await this.#docker.listContainers({ all: true, filters: { label: [`${STANDIN_RUN_LABEL}=${this.runId}`] } });
    return listed.map((c) => `${c.Names[0] ?? c.Id} ${c.State}`);
  }

  async close(): Promise<void> {
    for (const box of this.all()) await this.destroy(box).catch(() => {});
    const left = await this.#docker.listContainers({ all: true, filters: { label: [`${STANDIN_RUN_LABEL}=${this.runId}`] } });
    await Promise.all(
      left.map((c) =>
        this.#docker
          .getContainer(c.Id)
          .remove({ force: true, v: true })
          .catch(() => {}),
      ),
    );
  }
}
