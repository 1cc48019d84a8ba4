/**
 * The MicroVMs the stand-in holds, each a real local sandbox (a LocalBoxes
 * container). An image is what the stand-in knows of a MicroVM image: files
 * laid into the VM (the worker, the secrets its own image would carry) and
 * the command its run hook starts. The run hook payload reaches that command
 * as one line on its stdin: boxes share the host's network namespace, so a
 * hook server on a fixed port (:9000 in a real VM) cannot be given to each.
 * A VM whose run hook process ends is terminated, like a VM whose main
 * process exits.
 *
 * Without boxes (`null`) a VM is a record only, RUNNING at once: for tests that
 * count launches rather than run them.
 */
import { randomBytes } from "node:crypto";
import type { Box, LocalBoxes } from "@openma/standin-kit";
import type { Scheduler } from "@openma/time";

export type MicrovmState = "PENDING" | "RUNNING" | "SUSPENDING" | "SUSPENDED" | "TERMINATING" | "TERMINATED";

export interface MicrovmImage {
  /** Laid into the VM before the run hook starts (mode 0644 unless given). */
  files?: readonly { path: string; content: Uint8Array | string; mode?: number }[];
  /** The run hook's argv; it reads the payload from its first stdin line. */
  command: readonly string[];
}

export interface RunInput {
  imageIdentifier: string;
  imageVersion: string;
  runHookPayload: string | undefined;
  maximumDurationInSeconds: number;
  executionRoleArn: string | undefined;
}

export interface Microvm {
  microvmId: string;
  state: MicrovmState;
  stateReason: string | undefined;
  input: RunInput;
  startedAt: Date;
  terminatedAt: Date | undefined;
  box: Box | undefined;
  /** Run hook output (stderr and stdout), the tail only: what `logging` would ship. */
  log: string;
  /** Settles once the VM's start finished (whatever its outcome). */
  started: Promise<void>;
}

const LOG_TAIL = 16 * 1024;

export class MicrovmTable {
  readonly #vms = new Map<string, Microvm>();
  readonly #boxes: LocalBoxes | null;
  readonly #images: ReadonlyMap<string, MicrovmImage>;
  readonly #scheduler: Scheduler;
  readonly #closing = new AbortController();

  constructor(boxes: LocalBoxes | null, images: ReadonlyMap<string, MicrovmImage>, scheduler: Scheduler) {
    this.#boxes = boxes;
    this.#images = images;
    this.#scheduler = scheduler;
  }

  hasImage(identifier: string): boolean {
    return this.#images.has(identifier);
  }

  get(id: string): Microvm | undefined {
    return this.#vms.get(id);
  }

  all(): Microvm[] {
    return [...this.#vms.values()];
  }

  /** Creates the VM record and starts its sandbox in the background (the API answers PENDING at once). */
  run(input: RunInput): Microvm {
    const microvmId = `mvm-${randomBytes(8).toString("hex")}`;
    const vm: Microvm = {
      microvmId,
      state: "PENDING",
      stateReason: undefined,
      input,
      startedAt: new Date(this.#scheduler.now()),
      terminatedAt: undefined,
      box: undefined,
      log: "",
      started: Promise.resolve(),
    };
    this.#vms.set(microvmId, vm);
    vm.started = this.#start(vm).catch((err: unknown) => {
      vm.stateReason = `the VM failed to start: ${err instanceof Error ? err.message : String(err)}`;
      return this.#finish(vm);
    });
    this.#scheduler.sleep(input.maximumDurationInSeconds * 1000, this.#closing.signal).then(
      () => this.terminate(vm, "maximum duration reached"),
      () => {},
    );
    return vm;
  }

  async #start(vm: Microvm): Promise<void> {
    const image = this.#images.get(vm.input.imageIdentifier);
    if (image === undefined) throw new Error(`unknown image ${vm.input.imageIdentifier}`);
    if (this.#boxes === null) {
      vm.state = "RUNNING";
      return;
    }
    const box = await this.#boxes.create("mvm-");
    vm.box = box;
    if (vm.state !== "PENDING") return this.#finish(vm);
    const signal = AbortSignal.timeout(60_000);
    for (const file of image.files ?? []) {
      const content = typeof file.content === "string" ? new TextEncoder().encode(file.content) : file.content;
      const wrote = await box.tools.writeFile({ path: file.path, content, mode: file.mode ?? 0o644, signal });
      if (wrote.type !== "ok") throw new Error(`could not lay ${file.path} into the VM: ${wrote.message}`);
    }
    const started = await box.tools.spawnProcess({
      command: image.command,
      cwd: "/",
      onOutput: (_stream, chunk) => {
        vm.log = (vm.log + Buffer.from(chunk).toString("utf8")).slice(-LOG_TAIL);
      },
    });
    if (started.type !== "started") throw new Error(`the run hook did not start: ${started.message}`);
    await started.process.write(`${vm.input.runHookPayload ?? ""}\n`);
    started.process.closeStdin();
    if (vm.state === "PENDING") vm.state = "RUNNING";
    void started.process.done.then((end) => {
      const how = end.type === "exited" ? `exited with code ${end.exitCode}` : end.type;
      return this.terminate(vm, `the run hook ${how}`);
    });
  }

  /** TerminateMicrovm: idempotent; the sandbox really goes away. */
  async terminate(vm: Microvm, reason: string): Promise<void> {
    if (vm.state === "TERMINATED" || vm.state === "TERMINATING") return;
    vm.state = "TERMINATING";
    vm.stateReason = reason;
    await vm.started;
    await this.#finish(vm);
  }

  async #finish(vm: Microvm): Promise<void> {
    vm.state = "TERMINATING";
    const box = vm.box;
    vm.box = undefined;
    if (box) await this.#boxes?.destroy(box).catch(() => {});
    vm.state = "TERMINATED";
    vm.terminatedAt = new Date(this.#scheduler.now());
  }

  close(): void {
    this.#closing.abort();
  }
}
