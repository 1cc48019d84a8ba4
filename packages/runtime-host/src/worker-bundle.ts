/**
 * The ama_worker launcher for a remote runtime: one self-contained file
 * (the launcher plus the official SDK, bundled with esbuild), because a
 * cloud sandbox has no host directory to bind the SDK from. It is built once
 * per runtime host and written into each runtime before the worker starts,
 * at a path the sandbox user can write (`/tmp/.openma/launcher`); a marker
 * named after its hash makes a second install in the same runtime a no-op.
 */
import { createHash } from "node:crypto";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import type { ManagedSandboxLease, SandboxProcessPort, ToolSandboxPort } from "@openma/contract";

export const REMOTE_LAUNCHER_DIR = "/tmp/.openma/launcher";
export const REMOTE_LAUNCHER = `${REMOTE_LAUNCHER_DIR}/ama-worker.mjs`;

export interface WorkerBundle {
  content: Uint8Array;
  sha256: string;
}

/** Bundles `sandbox/ama-worker-core.mjs` with the SDK this package depends on. */
export async function buildWorkerBundle(): Promise<WorkerBundle> {
  const root = join(dirname(fileURLToPath(import.meta.url)), "..");
  const content = await bundleForSandboxNode({
    contents:
      'import Anthropic from "@anthropic-ai/sdk";\nimport { runWorker } from "./sandbox/ama-worker-core.mjs";\nrunWorker(async () => Anthropic);\n',
    resolveDir: root,
    sourcefile: "ama-worker-remote.mjs",
    loader: "js",
  });
  return { content, sha256: createHash("sha256").update(content).digest("hex") };
}

/**
 * One ESM file for the Node of a sandbox image, with every dependency built
 * in (a sandbox has no node_modules). `withRequire` gives the module a
 * `require` for bundled CommonJS that calls Node built-ins through it.
 */
export async function bundleForSandboxNode(entry: {
  contents: string;
  resolveDir: string;
  sourcefile: string;
  loader: "js" | "ts";
  withRequire?: boolean;
}): Promise<Uint8Array> {
  const { withRequire, ...stdin } = entry;
  const { build } = await import("esbuild");
  const result = await build({
    stdin,
    bundle: true,
    platform: "node",
    format: "esm",
    target: "node22",
    write: false,
    legalComments: "none",
    logLevel: "silent",
    ...(withRequire
      ? {
          banner: {
            js: 'import { createRequire as __openmaRequire } from "node:module"; const require = __openmaRequire(import.meta.url);',
          },
        }
      : {}),
  });
  const file = result.outputFiles[0];
  if (file === undefined) throw new Error(`esbuild produced no bundle of ${entry.sourcefile}`);
  return file.contents;
}

/** Writes the bundle into a runtime unless this very bundle is already there. */
export async function installWorkerBundle(tools: ToolSandboxPort, bundle: WorkerBundle, signal: AbortSignal): Promise<void> {
  const marker = `${REMOTE_LAUNCHER_DIR}/.bundle-${bundle.sha256.slice(0, 16)}`;
  const present = await tools.stat({ path: marker, signal });
  if (present.type === "found") return;
  const wrote = await tools.writeFile({ path: REMOTE_LAUNCHER, content: bundle.content, mode: 0o644, signal });
  if (wrote.type !== "ok") throw new Error(`installing the worker launcher failed: ${wrote.message}`);
  const marked = await tools.writeFile({ path: marker, content: new Uint8Array(), mode: 0o644, signal });
  if (marked.type !== "ok") throw new Error(`installing the worker launcher failed: ${marked.message}`);
}

/**
 * A SandboxProcessPort that runs `prepare` in the runtime before each
 * process (installing what the harness needs; idempotent, so a second
 * placement in the same runtime pays one check). A failed preparation is
 * that spawn's error.
 */
export function preparedProcesses(inner: SandboxProcessPort, prepare: (lease: ManagedSandboxLease) => Promise<void>): SandboxProcessPort {
  return {
    async spawn(lease, input) {
      try {
        await prepare(lease);
      } catch (err) {
        return { type: "error", message: err instanceof Error ? err.message : String(err) };
      }
      return inner.spawn(lease, input);
    },
  };
}
