/** What every route can reach through `c.get(...)`: injected, never global. */
import type { AcpReleaseCatalog } from "@openma/acp";
import type { SelfHostedBrain } from "@openma/execution/placement";
import type { OpenmaMetrics } from "@openma/metrics";
import type { PriceTable } from "@openma/pricing";
import type { Clock, IdFactory, SecretBox, Storage } from "@openma/storage";
import type { Credential } from "./auth.ts";
import type { TransferSettings } from "./transfers.ts";

export interface Logger {
  info(obj: object, msg?: string): void;
  warn(obj: object, msg?: string): void;
  error(obj: object, msg?: string): void;
}

export const silentLogger: Logger = { info() {}, warn() {}, error() {} };

export interface ApiDeps {
  storage: Storage;
  clock: Clock;
  ids: IdFactory;
  logger: Logger;
  /** Admin API keys supplied by configuration (OPENMA_API_KEY), compared by hash. */
  configuredApiKeyHashes: ReadonlySet<string>;
  /** Public base URL put into work secrets (`api_base_url`). */
  publicBaseUrl?: string | undefined;
  /** Work lease TTL reported to workers. */
  workTtlSeconds: number;
  /** Upper bound for a long-poll wait (the API caps block_ms at 999). */
  /** `sendBufferBytes`: see SseOptions (default 1 MiB). */
  sse: { keepAliveMs: number; sendBufferBytes?: number | undefined };
  /** Who runs the brain of self-hosted sessions (see @openma/execution/placement); default `work_item`. */
  selfHostedBrain?: SelfHostedBrain;
  /**
   * Called after an archive or delete of a session committed, before the
   * response, so this process lets go at once of what it holds for the session
   * (`openma serve`: its sandbox). Other processes sharing the database learn
   * it from a `SESSIONS_CLOSED_TOPIC` wake-up on the change bus (no payload:
   * they re-check the sessions they hold). A failure is logged and never fails
   * the request, which has already committed.
   */
  onSessionClosed?: SessionClosedHook;
  /**
   * Where a session's workspace is a host directory (`openma serve` with a
   * local sandbox): the workspace browser extension reads it (routes/workspace.ts).
   * Absent, or `null` for a session: that route answers 404.
   */
  workspaces?: { dirOf(sessionId: string): string | null };
  /**
   * Seals vault credential secrets at rest (see @openma/storage vault-secrets).
   * `openma serve` always configures one (OPENMA_SECRET_KEY or a key generated
   * into the data dir) and binds it to `storage` for the harness. Without it,
   * secrets are written as plaintext JSON and sealed ones cannot be read.
   */
  secrets?: SecretBox | undefined;
  /** List prices for a thread's `usage.list_cost` (the harness prices the session's); default: `@openma/pricing`'s public list prices. */
  prices?: PriceTable | undefined;
  /** Buffers, limits and concurrency of large uploads and downloads (transfers.ts); default: built-in values. */
  transfers?: TransferSettings | undefined;
  /** Request, event-stream and append metrics (`openma serve`: Prometheus); absent: none recorded. */
  metrics?: OpenmaMetrics | undefined;
  /** Webhook delivery policy; `allowPrivateTargets` (OPENMA_WEBHOOK_ALLOW_PRIVATE_TARGETS) admits loopback/private URLs and plain http. */
  webhooks?: { allowPrivateTargets: boolean } | undefined;
  /**
   * The ACP agent releases this server can run (`openma serve`: the agent
   * cache; docs/acp.md "Selecting an agent"). Absent: an agent or environment
   * that selects one with `metadata["openma.acp_agent"]` is refused.
   */
  acpReleases?: AcpReleaseCatalog | undefined;
  /**
   * Traces (`openma serve` with an OTLP endpoint): a request that queues a
   * turn runs in a span whose W3C trace context is stored with the turn and
   * its Work item, so the turn continues the request's trace. Absent: no
   * span, nothing stored.
   */
  tracing?: RequestTracing | undefined;
}

export interface RequestTracing {
  /** Runs `fn` inside a new active span (an error status when it throws). */
  inSpan<T>(name: string, attributes: Record<string, string>, fn: () => Promise<T>): Promise<T>;
  /** The active span's W3C `traceparent`, or null outside one. */
  traceparent(): string | null;
  /** Runs `fn` outside every span: work it starts that outlives the request must not land in the request's trace. */
  detached<T>(fn: () => T): T;
}

/** Published on the change bus after a session is archived or deleted. */
export const SESSIONS_CLOSED_TOPIC = "sessions:closed";

export type SessionClosedHook = (sessionId: string, why: "archived" | "deleted") => void | Promise<void>;

export type AppEnv = {
  Variables: {
    deps: ApiDeps;
    requestId: string;
    credential: Credential | null;
  };
};
