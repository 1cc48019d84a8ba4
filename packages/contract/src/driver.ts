/**
 * Harness placement drivers, exactly as the runtime-host specification shapes
 * them. `ama_worker` runs an unmodified Anthropic EnvironmentWorker;
 * `openma_supervised` runs a harness under the OpenMA supervisor protocol.
 */
import { canonicalJson } from "./json.ts";

export const HARNESS_SUPERVISOR_PROTOCOL = "openma-harness-supervisor-v1";

export interface RuntimeProcess {
  command: string;
  args?: string[];
  cwd?: string;
}

export type HarnessDriver =
  | {
      type: "ama_worker";
      process: RuntimeProcess;
    }
  | {
      type: "openma_supervised";
      protocol: typeof HARNESS_SUPERVISOR_PROTOCOL;
      supervisor: RuntimeProcess;
      harness: { id: string; version: string };
      readyTimeoutMs: number;
      heartbeatTimeoutMs: number;
      drainTimeoutMs: number;
    };

export type HarnessDriverType = HarnessDriver["type"];

export const HARNESS_DRIVER_TYPES: readonly HarnessDriverType[] = ["ama_worker", "openma_supervised"];

/** What a process-memory checkpoint must match before a later owner may restore it. */
export interface HarnessIdentity {
  id: string;
  version: string;
  /** Canonical JSON of everything that shapes the running process; never contains secrets. */
  runtimeIdentity: string;
}

/** The official worker has no harness version of its own; this names its protocol generation. */
export const AMA_WORKER_HARNESS = { id: "ama_worker", version: "ama-worker-v1" } as const;

/**
 * Identity of the process a driver starts. Timeouts are left out on purpose:
 * they change how the host supervises a process, not what the process is, so
 * tuning them must not invalidate a checkpoint.
 */
export function harnessIdentityOf(driver: HarnessDriver): HarnessIdentity {
  if (driver.type === "ama_worker") {
    return { ...AMA_WORKER_HARNESS, runtimeIdentity: canonicalJson({ type: driver.type, process: processIdentity(driver.process) }) };
  }
  return {
    id: driver.harness.id,
    version: driver.harness.version,
    runtimeIdentity: canonicalJson({
      type: driver.type,
      protocol: driver.protocol,
      supervisor: processIdentity(driver.supervisor),
      harness: driver.harness,
    }),
  };
}

function processIdentity(process: RuntimeProcess): RuntimeProcess {
  return { command: process.command, args: process.args ?? [], cwd: process.cwd };
}
