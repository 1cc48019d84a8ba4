/**
 * A runtime host's ACP lane (ADR 0034): what `startRuntimeHost` adds when
 * configured with `harness: {type: "acp", ...}`. The harness bundle and the
 * agent cache bound read-only into every sandbox, one host-side model
 * gateway per key style on a unix socket in the bridged run directory (the
 * real key stays here; the agent holds a placeholder), the profile of the
 * `openma_supervised` lane, and the runner.
 */
import { rm } from "node:fs/promises";
import { join } from "node:path";
import { acpReleaseCatalog, agentCacheRoot } from "@openma/acp";
import { pinnedAcpRelease, sessionAgentModel } from "@openma/api";
import type { ManagedRuntimeProfile, ManagedSandboxPort, SandboxProcessPort } from "@openma/contract";
import { type ModelGateway, type ModelKeyStyle, openModelGateway } from "@openma/model-gateway";
import type { Storage } from "@openma/storage";
import { PROTOCOL, type SupervisorLogEntry } from "@openma/supervisor";
import type { Scheduler } from "@openma/time";
import { ACP_SANDBOX_PATHS } from "./acp-harness/launch.ts";
import { buildAcpHarnessBundle } from "./acp-harness-bundle.ts";
import { AcpSupervisedRunner } from "./acp-supervised-runner.ts";
import type { WorkTicket } from "./ama-worker-runner.ts";

export interface AcpHarnessConfig {
  type: "acp";
  /** The model upstream the gateway forwards to (it must speak the pinned agent's dialect) and the key it injects. */
  model: { baseUrl: string; apiKey: string };
  /** The agent cache (default: `$OPENMA_ACP_AGENT_CACHE` or ~/.cache/openma/acp-agents). */
  agentCacheRoot?: string;
  /** How long a harness stays after its session went idle with no more input (default 60 s). */
  maxIdleMs?: number;
  /** Supervisor bounds (defaults: ready 60 s, heartbeat 30 s, drain 30 s). */
  readyTimeoutMs?: number;
  heartbeatTimeoutMs?: number;
  drainTimeoutMs?: number;
}

/** The `openma_supervised` profile of the ACP lane; the harness identity is the session's pinned release, set per run. */
export function acpSupervisedProfile(config: AcpHarnessConfig): ManagedRuntimeProfile {
  return {
    workspace: { requirement: "durable", preferredStrategies: ["checkpoint_restore"] },
    outputs: { requirement: "durable", preferredStrategies: ["final_collect"] },
    runtimeCheckpoint: "disabled",
    driver: {
      type: "openma_supervised",
      protocol: PROTOCOL,
      supervisor: { command: "node", args: [ACP_SANDBOX_PATHS.harness], cwd: "/workspace" },
      harness: { id: "acp", version: "pinned" },
      readyTimeoutMs: config.readyTimeoutMs ?? 60_000,
      heartbeatTimeoutMs: config.heartbeatTimeoutMs ?? 30_000,
      drainTimeoutMs: config.drainTimeoutMs ?? 30_000,
    },
  };
}

export interface AcpLane {
  binds: { source: string; target: string }[];
  profile: ManagedRuntimeProfile;
  runner(parts: {
    processes: SandboxProcessPort;
    sandbox: ManagedSandboxPort;
    ticketFor: (scope: { environmentId: string; sessionId: string }) => WorkTicket | undefined;
    scheduler: Scheduler;
    onLog?: (runtimeId: string, entry: SupervisorLogEntry) => void;
  }): AcpSupervisedRunner;
  close(): Promise<void>;
}

export async function openAcpLane(options: {
  config: AcpHarnessConfig;
  stateDir: string;
  /** Host directory bound at /openma/run (the API bridge's socket lives there too). */
  runDir: string;
  storage: Storage;
  apiUrl: string;
}): Promise<AcpLane> {
  const { config, runDir } = options;
  const cacheRoot = config.agentCacheRoot ?? agentCacheRoot(process.env);
  const catalog = acpReleaseCatalog(cacheRoot);
  const bundle = await buildAcpHarnessBundle(join(options.stateDir, "acp-harness"));
  const gateways = new Map<ModelKeyStyle, Promise<ModelGateway>>();
  const modelSocket = async (keyStyle: ModelKeyStyle): Promise<string> => {
    const name = `model-${keyStyle}.sock`;
    let gateway = gateways.get(keyStyle);
    if (gateway === undefined) {
      gateway = rm(join(runDir, name), { force: true }).then(() =>
        openModelGateway({
          socketPath: join(runDir, name),
          upstream: config.model.baseUrl,
          apiKey: () => config.model.apiKey,
          keyStyle,
        }),
      );
      gateways.set(keyStyle, gateway);
    }
    await gateway;
    return `${ACP_SANDBOX_PATHS.runDir}/${name}`;
  };
  return {
    binds: [
      { source: bundle.dir, target: ACP_SANDBOX_PATHS.harnessDir },
      { source: cacheRoot, target: ACP_SANDBOX_PATHS.agents },
    ],
    profile: acpSupervisedProfile(config),
    runner: (parts) =>
      new AcpSupervisedRunner({
        ...parts,
        pinnedRelease: (sessionId) => pinnedAcpRelease(options.storage.db, sessionId),
        agentModel: (sessionId) => sessionAgentModel(options.storage.db, sessionId),
        installed: async (pinned) => (await catalog.installed(pinned)) !== null,
        modelSocket,
        apiUrl: options.apiUrl,
        maxIdleMs: config.maxIdleMs ?? 60_000,
      }),
    async close() {
      for (const gateway of gateways.values()) await (await gateway.catch(() => null))?.close();
      gateways.clear();
    },
  };
}
