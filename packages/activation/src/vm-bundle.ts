/**
 * The in-VM worker as one file (vm/microvm-worker.mjs plus the official SDK,
 * bundled with esbuild): what a MicroVM image carries and its run hook starts
 * with `node`. A real image bakes it in at build time; the stand-in's images
 * lay it into each VM.
 */
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

export const VM_WORKER_PATH = "/opt/openma/microvm-worker.mjs";
/** Where the image keeps the environment key (read by the worker, never passed to it). */
export const VM_ENVIRONMENT_KEY_PATH = "/etc/openma/environment-key";

export async function buildVmWorkerBundle(): Promise<Uint8Array> {
  const { build } = await import("esbuild");
  const result = await build({
    entryPoints: [join(dirname(fileURLToPath(import.meta.url)), "..", "vm", "microvm-worker.mjs")],
    bundle: true,
    platform: "node",
    format: "esm",
    target: "node22",
    write: false,
    legalComments: "none",
    logLevel: "silent",
  });
  const file = result.outputFiles[0];
  if (file === undefined) throw new Error("esbuild produced no VM worker bundle");
  return file.contents;
}

/** A MicroVM image (as the stand-in takes one) that runs the in-VM worker for this environment key. */
export async function vmWorkerImage(
  environmentKey: string,
): Promise<{ command: string[]; files: { path: string; content: Uint8Array | string; mode: number }[] }> {
  return {
    command: ["node", VM_WORKER_PATH],
    files: [
      { path: VM_WORKER_PATH, content: await buildVmWorkerBundle(), mode: 0o644 },
      { path: VM_ENVIRONMENT_KEY_PATH, content: environmentKey, mode: 0o600 },
    ],
  };
}
