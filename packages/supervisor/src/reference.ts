/**
 * Where the reference supervisor (bin/openma-supervisor.mjs) lives on the
 * host and where a composition binds it into a sandbox, read-only.
 *
 * Why `/openma/supervisor` and not somewhere under `/opt`: bubblewrap binds
 * the rootfs's top-level directories read-only, so it cannot create a mount
 * point inside them; a new top-level directory lands on the sandbox's own
 * root. Docker accepts either.
 */
import { fileURLToPath } from "node:url";

export const REFERENCE_SUPERVISOR = {
  /** Host directory holding the script (this package's bin/). */
  hostDir: fileURLToPath(new URL("../bin/", import.meta.url)).replace(/\/$/, ""),
  /** Where to bind `hostDir` inside the sandbox. */
  sandboxDir: "/openma/supervisor",
  script: "openma-supervisor.mjs",
} as const;

/** A read-only bind for the bubblewrap (`binds`) or node-docker (`binds`) driver options. */
export function referenceSupervisorBind(): { source: string; target: string; writable: false } {
  return { source: REFERENCE_SUPERVISOR.hostDir, target: REFERENCE_SUPERVISOR.sandboxDir, writable: false };
}

/** The supervisor command for a profile: `node <script> --harness-id … --harness-version … [options] -- <harness argv>`. */
export function referenceSupervisorCommand(input: {
  harness: { id: string; version: string };
  /** `--turns N` (default 1) or `--turns-file PATH`. */
  turns?: number | { file: string };
  harnessCommand: readonly string[];
}): { command: string; args: string[] } {
  const turns = input.turns ?? 1;
  return {
    command: "node",
    args: [
      `${REFERENCE_SUPERVISOR.sandboxDir}/${REFERENCE_SUPERVISOR.script}`,
      "--harness-id",
      input.harness.id,
      "--harness-version",
      input.harness.version,
      ...(typeof turns === "number" ? ["--turns", String(turns)] : ["--turns-file", turns.file]),
      "--",
      ...input.harnessCommand,
    ],
  };
}
