/**
 * Binding one ACP agent of one Session to its two state locations:
 *
 *   <ephemeral>/acp/<session>/<profile>/v1/native/   the agent's live home
 *     (ephemeral; may hold config and credentials; never checkpointed)
 *   <workspace>/.openma/harness-state/acp/<session>/<profile>/v1/
 *     acp-session.json, session-binding.json, native/ (declared artifacts only)
 *
 * The durable half lives inside the workspace so the workspace checkpoint
 * carries it to the next placement; the live half does not, so nothing the
 * agent writes outside the allowlist (auth files, caches) is ever published.
 */
import {
  type AcpAgentIdentity,
  type AcpArtifactKind,
  type AcpProfile,
  type AcpRestoreRename,
  type AcpResumeClaim,
  profileFor,
} from "./profiles.ts";

export const DEFAULT_WORKSPACE_ROOT = "/workspace";
export const DEFAULT_EPHEMERAL_ROOT = "/tmp/openma-harness-state";
export const BINDING_VERSION = "v1";

export class AcpStateError extends Error {
  override name = "AcpStateError";
}

export interface AcpBoundArtifact {
  /** Durable copy, under the workspace. */
  path: string;
  /** Where the agent reads and writes it, under the ephemeral native root. */
  runtimePath: string;
  kind: AcpArtifactKind;
  requiredForResume: boolean;
  restoreRename?: AcpRestoreRename;
}

export type AcpDurability = "native" | "acp" | "opaque";

export interface AcpStateBinding {
  sessionId: string;
  profile: AcpProfile;
  durability: AcpDurability;
  resume: AcpResumeClaim;
  /** Durable per-profile root: `<workspace>/.openma/harness-state/acp/<sid>/<profile>/v1`. */
  rootPath: string;
  /** The Session's durable directory (all profiles), removed on destroy. */
  sessionRootPath: string;
  bindingPath: string;
  checkpointPath: string;
  /** Durable copies of the artifacts: `<rootPath>/native`. */
  checkpointNativePath: string;
  /** Ephemeral per-profile root; exported to the agent as OPENMA_ACP_STATE_ROOT. */
  ephemeralRootPath: string;
  /** The Session's ephemeral directory (all profiles), removed on release. */
  ephemeralSessionPath: string;
  /** The agent's live native home: `<ephemeralRoot>/native`. */
  nativePath: string;
  artifacts: readonly AcpBoundArtifact[];
  /** Profile variables bound to the native root, plus OPENMA_ACP_STATE_ROOT. */
  env: Readonly<Record<string, string>>;
}

// Session ids become path segments: only a conservative alphabet, so no
// encoding games, no `.`/`..`, no separators.
const SESSION_ID = /^[A-Za-z0-9_-]{1,128}$/;

function join(base: string, rel: string): string {
  return rel === "" ? base : `${base}/${rel}`;
}

function absoluteRoot(label: string, value: string): string {
  if (!value.startsWith("/") || value.split("/").some((s) => s === ".." || s === ".")) {
    throw new AcpStateError(`${label} must be an absolute normalized path`);
  }
  return value.length > 1 ? value.replace(/\/+$/, "") : value;
}

export interface BindAcpStateInput {
  sessionId: string;
  agent: AcpAgentIdentity;
  /** Where the Session's workspace is mounted; `/workspace` in every sandbox. */
  workspaceRoot?: string;
  /** Base of the ephemeral tree; `/tmp/openma-harness-state` in every sandbox. */
  ephemeralRoot?: string;
}

export function bindAcpState(input: BindAcpStateInput): AcpStateBinding {
  if (!SESSION_ID.test(input.sessionId)) throw new AcpStateError("sessionId must match [A-Za-z0-9_-]{1,128}");
  const workspace = absoluteRoot("workspaceRoot", input.workspaceRoot ?? DEFAULT_WORKSPACE_ROOT);
  const ephemeral = absoluteRoot("ephemeralRoot", input.ephemeralRoot ?? DEFAULT_EPHEMERAL_ROOT);
  const profile = profileFor(input.agent);
  const sessionRootPath = `${workspace}/.openma/harness-state/acp/${input.sessionId}`;
  const rootPath = `${sessionRootPath}/${profile.id}/${BINDING_VERSION}`;
  const ephemeralSessionPath = `${ephemeral}/acp/${input.sessionId}`;
  const ephemeralRootPath = `${ephemeralSessionPath}/${profile.id}/${BINDING_VERSION}`;
  const nativePath = `${ephemeralRootPath}/native`;
  const checkpointNativePath = `${rootPath}/native`;
  const env: Record<string, string> = {};
  for (const [name, rel] of Object.entries(profile.env)) env[name] = join(nativePath, rel);
  env.OPENMA_ACP_STATE_ROOT = ephemeralRootPath;
  const durability: AcpDurability = profile.id === "opaque" ? "opaque" : profile.artifacts.length > 0 ? "native" : "acp";
  return {
    sessionId: input.sessionId,
    profile,
    durability,
    resume: profile.resume,
    rootPath,
    sessionRootPath,
    bindingPath: `${rootPath}/session-binding.json`,
    checkpointPath: `${rootPath}/acp-session.json`,
    checkpointNativePath,
    ephemeralRootPath,
    ephemeralSessionPath,
    nativePath,
    artifacts: profile.artifacts.map((a) => ({
      path: join(checkpointNativePath, a.path),
      runtimePath: join(nativePath, a.path),
      kind: a.kind,
      requiredForResume: a.requiredForResume,
      ...(a.restoreRename ? { restoreRename: a.restoreRename } : {}),
    })),
    env,
  };
}
