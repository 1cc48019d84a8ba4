/**
 * A DriverUnderTest for a remote (cloud) driver. Its `/workspace` and
 * `/mnt/session/outputs` are not host bind mounts: they live in the remote
 * runtime and reach the host through the host's remote workspace and output
 * adapters (attach pushes, checkpoint and collect pull). Here the same two
 * moves are made through the driver's own tool port, so the suite's binding
 * case checks what a remote driver must guarantee: a seeded file is there
 * for the harness, and what the harness writes can be read back.
 *
 * The stand-in runs its runtimes as local containers, so the host-process
 * probes (tree kill, secrets in argv) see them as they would a local driver.
 */

import type { ManagedSandboxLease, ManagedSandboxPort, SessionOutputBinding, ToolSandboxPort, WorkspaceBinding } from "@openma/contract";
import { OUTPUTS_MOUNT_PATH, WORKSPACE_MOUNT_PATH } from "@openma/contract";
import { afterAll, describe, expect, it } from "vitest";
import { type DriverSuiteOptions, type DriverUnderTest, describeDriver } from "./driver-suite.ts";
import { hostProcesses } from "./host-processes.ts";

export type RemoteDriver = ManagedSandboxPort & { toolSandbox(lease: ManagedSandboxLease): ToolSandboxPort };

export function remoteDriverUnderTest(options: { open(): RemoteDriver; close(): Promise<void> }): DriverUnderTest {
  const sandbox = options.open();
  let counter = 0;
  /** Seeds waiting for the runtime their bindings are acquired into (the attach a host adapter makes). */
  const seeds = new Map<string, Readonly<Record<string, string>>>();
  /** The tool port of the runtime each binding went into (the pull a host adapter makes). */
  const attached = new Map<string, ToolSandboxPort>();
  let pending: { workspace: string; outputs: string } | null = null;
  const never = () => new AbortController().signal;
  return {
    sandbox,
    async bindings(seed) {
      const id = `${Date.now().toString(36)}${++counter}`;
      const workspace: WorkspaceBinding = { bindingId: `ws-${id}`, strategy: "ephemeral", mountPath: WORKSPACE_MOUNT_PATH };
      const outputs: SessionOutputBinding = { bindingId: `out-${id}`, strategy: "final_collect", mountPath: OUTPUTS_MOUNT_PATH };
      seeds.set(workspace.bindingId, seed);
      pending = { workspace: workspace.bindingId, outputs: outputs.bindingId };
      return { workspace, outputs };
    },
    async tools(lease) {
      const tools = sandbox.toolSandbox(lease as ManagedSandboxLease);
      if (pending !== null) {
        const { workspace, outputs } = pending;
        pending = null;
        for (const [path, text] of Object.entries(seeds.get(workspace) ?? {})) {
          const wrote = await tools.writeFile({ path: `${WORKSPACE_MOUNT_PATH}/${path}`, content: Buffer.from(text), signal: never() });
          if (wrote.type !== "ok") throw new Error(`seeding ${path} failed: ${wrote.message}`);
        }
        attached.set(workspace, tools);
        attached.set(outputs, tools);
      }
      return tools;
    },
    async readBinding(binding, relativePath) {
      const tools = attached.get(binding.bindingId);
      if (!tools) return null;
      const read = await tools.readFile({ path: `${binding.mountPath}/${relativePath}`, maxBytes: 1 << 20, signal: never() });
      return read.type === "ok" ? Buffer.from(read.content).toString("utf8") : null;
    },
    reopen: async () => options.open(),
    hostProcesses,
    close: options.close,
  };
}

/** What the check after a cloud driver's suite reads of its stand-in. */
export interface SuiteStandIn {
  live(): number;
  readonly boxes: { containers(): Promise<readonly unknown[]> };
  close(): Promise<void>;
}

/**
 * The shared driver suite on a cloud driver against its vendor's stand-in
 * (started once for the file), then the check that the stand-in holds no
 * `unit` (default "sandbox") and the engine no container of it.
 */
export function describeRemoteDriver<S extends SuiteStandIn>(
  name: string,
  options: { start(): Promise<S>; open(standIn: S): RemoteDriver; unit?: string; suite?: DriverSuiteOptions },
): void {
  let standIn: S | undefined;
  describeDriver(
    name,
    async () => {
      const started = await options.start();
      standIn = started;
      return remoteDriverUnderTest({ open: () => options.open(started), close: async () => {} });
    },
    options.suite,
  );
  describe(`the ${name} stand-in after the suite`, () => {
    afterAll(async () => {
      await standIn?.close();
    });

    it(`holds no ${options.unit ?? "sandbox"} and the engine no container of it`, async () => {
      expect(standIn).toBeDefined();
      expect(standIn!.live()).toBe(0);
      expect(await standIn!.boxes.containers()).toEqual([]);
    });
  });
}

/** A driver's configuration from its stand-in's variables; a stand-in that lacks one is a broken test. */
export function configFromStandIn<C extends object>(result: C | { missing: string[] }): C {
  if ("missing" in result) throw new Error(`the stand-in's env lacks ${result.missing.join(", ")}`);
  return result;
}
