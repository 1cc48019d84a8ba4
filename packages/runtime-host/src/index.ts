/**
 * @openma/runtime-host: `openma runtime-host`, the ama_worker lane on local or cloud sandboxes (see runtime-host.ts),
 * or the ACP harness in the openma_supervised lane on bubblewrap (acp-lane.ts, ADR 0034).
 */
export { ACP_PLACEHOLDER_KEY, ACP_SANDBOX_PATHS, type AcpHarnessLaunch } from "./acp-harness/launch.ts";
export { type AcpHarnessBundle, buildAcpHarnessBundle } from "./acp-harness-bundle.ts";
export { type AcpHarnessConfig, type AcpLane, acpSupervisedProfile, openAcpLane } from "./acp-lane.ts";
export { AcpSupervisedRunner, type AcpSupervisedRunnerOptions } from "./acp-supervised-runner.ts";
export { AmaWorkerRunner, type AmaWorkerRunnerOptions, type WorkTicket } from "./ama-worker-runner.ts";
export { type ApiBridge, openApiBridge } from "./api-bridge.ts";
export { openRemoteParts, type RemoteRuntimeHostDriver, type RemoteSandboxDriver, remoteProfile } from "./remote.ts";
export {
  AMA_WORKER_PROFILE,
  type RunningRuntimeHost,
  type RuntimeHostDriver,
  type RuntimeHostInstruments,
  type RuntimeHostOptions,
  SANDBOX_PATHS,
  startRuntimeHost,
} from "./runtime-host.ts";
export { type RuntimeHostWarmPool, type RuntimeHostWarmPoolOptions, runtimeHostWarmPool } from "./warm-compute.ts";
export { type RuntimeHostLogger, TicketBoard, WorkLoop, type WorkLoopOptions } from "./work-loop.ts";
export { buildWorkerBundle, installWorkerBundle, preparedProcesses, REMOTE_LAUNCHER, type WorkerBundle } from "./worker-bundle.ts";
