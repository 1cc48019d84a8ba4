/**
 * The ACP harness's launch message: the one line the host writes to the
 * harness's stdin before the supervisor protocol starts (so the sessions
 * token never appears in argv or in an environment a `ps` or a tool could
 * read). Everything else in it is non-secret placement data.
 */
import { z } from "zod";

/** Where the host binds things inside an ACP sandbox. Top-level, so bwrap can create the mount points. */
export const ACP_SANDBOX_PATHS = {
  harnessDir: "/openma/acp-harness",
  harness: "/openma/acp-harness/acp-harness.mjs",
  agents: "/openma/agents",
  runDir: "/openma/run",
  apiSocket: "/openma/run/api.sock",
} as const;

/** What the agent holds instead of the model key (the host-side gateway injects the real one). */
export const ACP_PLACEHOLDER_KEY = "openma-placeholder";

export const acpHarnessLaunch = z.object({
  type: z.literal("acp_launch"),
  sessionId: z.string().min(1).max(128),
  /** The Work item's claim-bound Session bearer: the harness's only credential. */
  sessionsToken: z.string().min(1).max(4096),
  /** The control plane, bridged into the sandbox (a unix socket; the sandbox has no network). */
  apiSocket: z.string().min(1),
  /** The host-side model gateway for this agent's key style. */
  modelSocket: z.string().min(1),
  /** The release the session pinned (sessions.acp_release). */
  agent: z.object({ id: z.string().min(1), version: z.string().min(1) }),
  /** The model id the session's agent version names (the agent asks for it); null: the agent's default. */
  model: z.string().min(1).max(256).nullable(),
  /** How long the harness stays after the session went idle with no more input. */
  maxIdleMs: z.number().int().positive(),
});
export type AcpHarnessLaunch = z.infer<typeof acpHarnessLaunch>;
