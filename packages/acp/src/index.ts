export {
  type AcpAgentRelease,
  agentCacheRoot,
  ensureAgentRelease,
  type InstalledAgentRelease,
  KNOWN_AGENT_RELEASES,
  listInstalledAgentReleases,
  releaseDir,
} from "./agent-cache.ts";
export {
  AcpAgentClient,
  type AcpChildProcess,
  type AcpClientHooks,
  type AcpOpenMode,
  AcpResumeError,
  type AcpSpawn,
  type AcpSpawnInput,
} from "./agent-client.ts";
export {
  AGENT_NAMES,
  type AgentName,
  type AgentSetup,
  agentLaunch,
  agentSetup,
  type ModelEndpoint,
  sandboxAgentProcess,
  setupForRelease,
} from "./agent-setups.ts";
export {
  type AcpBoundArtifact,
  type AcpDurability,
  type AcpStateBinding,
  AcpStateError,
  type BindAcpStateInput,
  bindAcpState,
  DEFAULT_EPHEMERAL_ROOT,
  DEFAULT_WORKSPACE_ROOT,
} from "./binding.ts";
export {
  type AcpCheckpoint,
  checkpointDocument,
  parseCheckpoint,
  parseSessionBinding,
  type SessionBindingDocument,
  sessionBindingDocument,
} from "./files.ts";
export {
  type AcpExecResult,
  AcpNativeState,
  type AcpProbeResult,
  type AcpStatePort,
  AcpStatePortError,
} from "./native-state.ts";
export { nodeSpawn, nodeStatePort } from "./node.ts";
export {
  ACP_PROFILES,
  type AcpAgentIdentity,
  type AcpArtifactDecl,
  type AcpArtifactKind,
  type AcpProfile,
  type AcpResumeClaim,
  OPAQUE_PROFILE,
  profileById,
  profileFor,
} from "./profiles.ts";
export { type ContextOccupancy, type EventDraft, modelRequestEnd, TurnProjection } from "./projection.ts";
export {
  buildRecoveryPrompt,
  type CanonicalEvent,
  DEFAULT_RECOVERY_BUDGET,
  MIN_RECOVERY_BUDGET,
  RECOVERY_WARNING_MESSAGE,
  RECOVERY_WARNING_SOURCE,
  type RecoveryPromptInput,
  recoveryHistoryLines,
} from "./recovery-prompt.ts";
export { sandboxSpawn, toolSandboxStatePort } from "./sandbox.ts";
export {
  ACP_AGENT_METADATA_KEY,
  type AcpReleaseCatalog,
  type AcpSelection,
  acpReleaseCatalog,
  type PinnedAcpRelease,
  parseAcpSelection,
} from "./selection.ts";
export {
  type AcpAgentLaunch,
  AcpSessionRunner,
  type AcpSessionRunnerOptions,
  type AcpStartOutcome,
  type AcpTurnResult,
} from "./session-runner.ts";
export { inputText, type PendingTurn, pendingTurn } from "./turns.ts";
export {
  type AcpRecoveryReason,
  type AcpResumePlan,
  type CanonicalWatermark,
  canonicalWatermark,
  decideResume,
  prepareResume,
} from "./watermarks.ts";
