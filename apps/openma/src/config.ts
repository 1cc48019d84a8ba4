/** Server configuration from the environment, validated once at start-up. */
import { resolve } from "node:path";
import { SELF_HOSTED_BRAIN_VALUES, type SelfHostedBrain } from "@openma/execution/placement";
import { type ContextWindowTable, contextWindowsFromEnv } from "@openma/harness/context-window";
import type { SearchProvider } from "@openma/harness/server-tools/search-provider";
import { webSearchProviderFromEnv } from "@openma/harness/server-tools/tavily";
import { type PriceTable, priceTableFromEnv } from "@openma/pricing";
import type { BlobEnv } from "@openma/storage/s3-blobs";
import { decodeSecretKey } from "@openma/storage/secret-box";
import { parseWarmPoolTargets, type WarmPoolTargets } from "@openma/warm-pool/config";
import { z } from "zod";
import { type ActivationConfig, activationEnv, activationOf } from "./activation.ts";
import type { PackageRegistries } from "./bwrap-packages.ts";
import { type EgressSettings, egressSettings } from "./egress.ts";
import { REMOTE_SANDBOX_DRIVERS, type RemoteSandboxName } from "./remote-sandboxes.ts";
import { SANDBOX_CHOICES, type SandboxChoice } from "./sandbox.ts";

/** `OPENMA_SANDBOX`: a local choice (sandbox.ts) or a cloud driver (remote-sandboxes.ts). */
const SERVE_SANDBOXES = [...SANDBOX_CHOICES, ...REMOTE_SANDBOX_DRIVERS] as const;
const RUNTIME_HOST_SANDBOXES = ["auto", "bubblewrap", "docker", ...REMOTE_SANDBOX_DRIVERS] as const;

const schema = z.object({
  PORT: z.coerce.number().int().min(0).max(65535).default(8787),
  HOST: z.string().default("127.0.0.1"),
  OPENMA_DATA_DIR: z.string().default("./.openma"),
  DATABASE_URL: z.string().optional(),
  // Postgres schema to create and use (several processes sharing one isolated test database).
  OPENMA_PG_SCHEMA: z
    .string()
    .regex(/^[a-z_][a-z0-9_]*$/, "OPENMA_PG_SCHEMA must be a lower-case identifier")
    .optional(),
  OPENMA_API_KEY: z.string().min(16, "OPENMA_API_KEY must be at least 16 characters").optional(),
  // Seals vault credential secrets at rest: base64 of 32 bytes; a comma-separated list rotates (first seals, all open).
  OPENMA_SECRET_KEY: z
    .string()
    .refine(
      (v) => v.split(",").every((k) => isSecretKey(k)),
      "OPENMA_SECRET_KEY must be base64 of 32 bytes, or a comma-separated list of such keys (the first seals)",
    )
    .transform((v) => v.split(",").map((k) => k.trim()))
    .optional(),
  OPENMA_PUBLIC_URL: z.url().optional(),
  OPENMA_WORK_TTL_SECONDS: z.coerce.number().int().min(2).max(3600).default(120),
  OPENMA_SSE_KEEPALIVE_MS: z.coerce.number().int().min(100).default(15_000),
  // Large transfers (docs/transfers.md): stream buffer per stage, the POST /v1/files limit, and how many run at once.
  OPENMA_TRANSFER_BUFFER_BYTES: z.coerce
    .number()
    .int()
    .min(16 * 1024)
    .max(64 * 1024 * 1024)
    .default(1024 * 1024),
  OPENMA_FILE_UPLOAD_LIMIT_BYTES: z.coerce
    .number()
    .int()
    .min(1)
    .max(5 * 1024 * 1024 * 1024)
    .default(500 * 1024 * 1024),
  OPENMA_SSE_SEND_BUFFER_BYTES: z.coerce
    .number()
    .int()
    .min(16 * 1024)
    .max(256 * 1024 * 1024)
    .default(1024 * 1024),
  OPENMA_MAX_CONCURRENT_TRANSFERS: z.coerce.number().int().min(1).max(10_000).default(16),
  LOG_LEVEL: z.enum(["fatal", "error", "warn", "info", "debug", "trace", "silent"]).default("info"),
  // The brain: the execution worker running the default harness (see packages/execution).
  OPENMA_BRAIN: z.enum(["on", "off"]).default("on"),
  // Deployments' cron scheduler and the webhook delivery worker (docs/deployments.md, docs/webhooks.md).
  OPENMA_SCHEDULER: z.enum(["on", "off"]).default("on"),
  OPENMA_SCHEDULER_INTERVAL_MS: z.coerce.number().int().min(100).max(60_000).default(10_000),
  OPENMA_WEBHOOKS: z.enum(["on", "off"]).default("on"),
  OPENMA_WEBHOOK_ALLOW_PRIVATE_TARGETS: z.enum(["0", "1", "false", "true", "off", "on"]).default("0"),
  OPENMA_WEBHOOK_MAX_ATTEMPTS: z.coerce.number().int().min(1).max(50).default(8),
  OPENMA_WEBHOOK_RETRY_BASE_MS: z.coerce.number().int().min(10).max(3_600_000).default(5_000),
  OPENMA_SELF_HOSTED_BRAIN: z.enum(SELF_HOSTED_BRAIN_VALUES).default("server"),
  OPENMA_EXECUTION_CONCURRENCY: z.coerce.number().int().min(1).max(1000).default(16),
  OPENMA_EXECUTION_LEASE_TTL_MS: z.coerce.number().int().min(3000).max(600_000).default(30_000),
  OPENMA_EXECUTION_POLL_MS: z.coerce.number().int().min(100).max(600_000).default(5_000),
  // Failed attempts at one turn before the worker gives it up (the session gets a session.error and goes idle).
  OPENMA_EXECUTION_MAX_ATTEMPTS: z.coerce.number().int().min(1).max(100).default(5),
  // Where the default harness's sandbox tools run (see sandbox.ts): bubblewrap, else Docker, else fail closed;
  // or a cloud driver (remote-sandboxes.ts). SANDBOX_PROVIDER is the seed's name for it.
  OPENMA_SANDBOX: z.enum(SERVE_SANDBOXES).optional(),
  SANDBOX_PROVIDER: z.enum(SERVE_SANDBOXES).optional(),
  // Session sandboxes (docs/serve-sandboxes.md): owner lease, reaper interval, idle timeout.
  OPENMA_SANDBOX_LEASE_TTL_MS: z.coerce.number().int().min(1500).max(3_600_000).default(60_000),
  OPENMA_SANDBOX_REAP_INTERVAL_MS: z.coerce.number().int().min(200).max(86_400_000).default(30_000),
  OPENMA_SANDBOX_IDLE_MS: z.coerce
    .number()
    .int()
    .min(1000)
    .max(7 * 86_400_000)
    .default(30 * 60_000),
  // Warm pools (docs/warm-pools.md, ADR 0027): `<environment id>=<size>` pairs, comma-separated; unset: none.
  OPENMA_WARM_POOL: z
    .string()
    .max(8192)
    .transform((text, ctx) => {
      const parsed = parseWarmPoolTargets(text);
      if (parsed.ok) return parsed.targets;
      ctx.addIssue({ code: "custom", message: parsed.message });
      return z.NEVER;
    })
    .optional(),
  // The egress gateway of local session sandboxes (apps/openma/src/egress.ts, ADR 0020): on, or off (no network at all);
  // the registries' hosts `allow_package_managers` adds; PEM files the gateway trusts upstream (comma-separated).
  OPENMA_EGRESS: z.enum(["on", "off"]).default("on"),
  OPENMA_EGRESS_PACKAGE_MANAGER_HOSTS: z.string().max(8192).optional(),
  OPENMA_EGRESS_UPSTREAM_CA: z.string().max(8192).optional(),
  // Registries the bubblewrap driver's npm and pip package installs use (default: the package managers' own).
  OPENMA_PACKAGES_NPM_REGISTRY: z.url({ protocol: /^https?$/ }).optional(),
  OPENMA_PACKAGES_PIP_INDEX_URL: z.url({ protocol: /^https?$/ }).optional(),
  // With no usable sandbox driver, install bubblewrap on start (root + apt-get only); see provision.ts.
  OPENMA_AUTO_PROVISION: z.enum(["on", "off", "1", "0", "true", "false"]).default("on"),
  // The runtime host (ama_worker lane): serve this self-hosted environment from this machine.
  OPENMA_RUNTIME_HOST_ENVIRONMENT_ID: z
    .string()
    .regex(/^[A-Za-z0-9_-]{1,128}$/, "must be an environment id")
    .optional(),
  ANTHROPIC_ENVIRONMENT_KEY: z.string().min(8).optional(),
  OPENMA_RUNTIME_HOST_SANDBOX: z.enum(RUNTIME_HOST_SANDBOXES).optional(),
  OPENMA_RUNTIME_HOST_CONCURRENCY: z.coerce.number().int().min(1).max(256).default(4),
  // The harness the runtime host runs (ADR 0034): the official worker, or the session's pinned ACP agent (openma_supervised).
  OPENMA_RUNTIME_HOST_HARNESS: z.enum(["ama_worker", "acp"]).default("ama_worker"),
  OPENMA_RUNTIME_FENCE_TTL_MS: z.coerce.number().int().min(1500).max(3_600_000).default(90_000),
  OPENMA_WORKER_MAX_IDLE_MS: z.coerce.number().int().min(0).max(86_400_000).optional(),
  // Activation (docs/activation.md): one AWS Lambda MicroVM per Work of these environments (acquire_then_session_poll).
  ...activationEnv,
  // Where a standalone `openma runtime-host` reaches the API (an embedded one uses its own listener).
  OPENMA_API_URL: z.url({ protocol: /^http$/ }).optional(),
  OPENMA_MODEL_BASE_URL: z.url().optional(),
  OPENMA_MODEL_API_KEY: z.string().optional(),
  ANTHROPIC_API_KEY: z.string().optional(),
  // S3-compatible blobs instead of files under OPENMA_DATA_DIR; @openma/storage/s3-blobs checks the combination.
  OPENMA_BLOB_URL: z
    .string()
    .regex(/^s3:\/\/[a-z0-9][a-z0-9.-]{1,61}[a-z0-9](\/.*)?$/, "OPENMA_BLOB_URL must be s3://bucket[/prefix]")
    .optional(),
  OPENMA_S3_ENDPOINT: z.url({ protocol: /^https?$/ }).optional(),
  OPENMA_S3_REGION: z
    .string()
    .regex(/^[a-z0-9-]{1,64}$/, "OPENMA_S3_REGION must be a region name like us-east-1")
    .optional(),
  OPENMA_S3_ACCESS_KEY_ID: z.string().max(256).optional(),
  OPENMA_S3_SECRET_ACCESS_KEY: z.string().max(1024).optional(),
  OPENMA_S3_FORCE_PATH_STYLE: z.enum(["true", "false", "1", "0"]).optional(),
  OPENMA_PRICE_TABLE: z.string().max(4096).optional(),
  // Operations (docs/operations.md): Prometheus /metrics, its scrape token, and the SIGTERM drain deadline.
  OPENMA_METRICS: z.enum(["on", "off"]).default("on"),
  OPENMA_METRICS_TOKEN: z.string().min(16, "OPENMA_METRICS_TOKEN must be at least 16 characters").optional(),
  OPENMA_DRAIN_TIMEOUT_MS: z.coerce.number().int().min(0).max(3_600_000).default(30_000),
});

export interface ServerConfig {
  port: number;
  host: string;
  dataDir: string;
  databaseUrl: string | undefined;
  pgSchema: string | undefined;
  apiKey: string | undefined;
  /** OPENMA_SECRET_KEY, current key first; absent: a key generated into the data dir. Secret: never log. */
  secretKeys: string[] | undefined;
  publicUrl: string | undefined;
  workTtlSeconds: number;
  sseKeepAliveMs: number;
  sseSendBufferBytes: number;
  transfers: { bufferBytes: number; fileUploadLimitBytes: number; maxConcurrent: number };
  logLevel: string;
  automation: {
    scheduler: boolean;
    schedulerIntervalMs: number;
    webhooks: boolean;
    allowPrivateWebhookTargets: boolean;
    webhookMaxAttempts: number;
    webhookRetryBaseMs: number;
  };
  brain: {
    enabled: boolean;
    selfHosted: SelfHostedBrain;
    concurrency: number;
    leaseTtlMs: number;
    pollIntervalMs: number;
    maxAttempts: number;
    sandbox: SandboxChoice | RemoteSandboxName;
    /** Install bubblewrap on start when no sandbox driver is usable. */
    autoProvision: boolean;
    /** The egress gateway of local session sandboxes (egress.ts). */
    egress: EgressSettings;
    /** Registries of the bubblewrap driver's npm and pip installs (bwrap-packages.ts). */
    registries: PackageRegistries;
    /** Session sandboxes: owner lease, reaper interval and idle timeout (ms). */
    sandboxes: { leaseTtlMs: number; reapIntervalMs: number; idleMs: number };
    /** Warm pool target per environment id (OPENMA_WARM_POOL); empty: no pools. */
    warmPools: WarmPoolTargets;
  };
  /** Upstream Messages API for the harness; without a key sessions fail with a clear `session.error`. Secret: never log. */
  model: { baseUrl: string | undefined; apiKey: string | undefined };
  /** List prices for `list_cost` and budgets: the defaults, overridden by the JSON file OPENMA_PRICE_TABLE names. */
  prices: PriceTable;
  /** Context windows for compaction: the defaults, overridden by OPENMA_CONTEXT_WINDOWS (JSON). */
  contextWindows: ContextWindowTable;
  /** The web_search provider (OPENMA_WEB_SEARCH_PROVIDER, TAVILY_API_KEY, OPENMA_TAVILY_BASE_URL); null: no web_search. Holds a secret: never log. */
  webSearch: SearchProvider | null;
  /** S3 blob settings when any is set (default: local files). Holds a secret: never log. */
  blobs?: BlobEnv | undefined;
  /** Set when this process serves a self-hosted environment (ama_worker lane). Holds a secret: never log. */
  runtimeHost: RuntimeHostConfig | undefined;
  /** Set when this process launches a MicroVM per Work of some environments (OPENMA_ACTIVATION_ENVIRONMENTS). */
  activation: ActivationConfig | undefined;
  /** `/metrics`, `/ready` and the SIGTERM drain (see ops.ts). The token is a secret: never log. */
  ops: { metrics: boolean; metricsToken: string | undefined; drainTimeoutMs: number; tracesEndpoint: string | undefined };
}

export interface RuntimeHostConfig {
  environmentId: string;
  /** The environment key: polls and claims Work; never enters a sandbox. */
  environmentKey: string;
  sandbox: (typeof RUNTIME_HOST_SANDBOXES)[number];
  concurrency: number;
  fenceTtlMs: number;
  workerMaxIdleMs: number | undefined;
  /** Standalone only; default http://127.0.0.1:<PORT>. */
  apiUrl: string;
  /** Where a cloud runtime's worker reaches the control plane (OPENMA_PUBLIC_URL; default: `apiUrl`). */
  publicUrl: string | undefined;
  /** This environment's warm pool (OPENMA_WARM_POOL; owner leases and reaping as OPENMA_SANDBOX_LEASE_TTL_MS and _REAP_INTERVAL_MS). */
  warmPool?: { target: number; leaseTtlMs: number; reapIntervalMs: number } | undefined;
  /**
   * OPENMA_RUNTIME_HOST_HARNESS: `ama_worker`, or `acp` (the pinned ACP agent under the in-sandbox ACP harness;
   * its model gateway forwards to OPENMA_MODEL_BASE_URL with OPENMA_MODEL_API_KEY, a secret: never log).
   */
  harness: { type: "ama_worker" } | { type: "acp"; model: { baseUrl: string; apiKey: string } };
}

export function loadConfig(env: NodeJS.ProcessEnv = process.env): ServerConfig {
  const parsed = schema.safeParse(Object.fromEntries(Object.entries(env).filter(([, v]) => v !== "")));
  if (!parsed.success) {
    const msg = parsed.error.issues.map((i) => `${i.path.join(".")}: ${i.message}`).join("; ");
    throw new Error(`invalid configuration: ${msg}`);
  }
  const e = parsed.data;
  return {
    port: e.PORT,
    host: e.HOST,
    dataDir: resolve(e.OPENMA_DATA_DIR),
    databaseUrl: e.DATABASE_URL,
    pgSchema: e.OPENMA_PG_SCHEMA,
    apiKey: e.OPENMA_API_KEY,
    secretKeys: e.OPENMA_SECRET_KEY,
    publicUrl: e.OPENMA_PUBLIC_URL,
    workTtlSeconds: e.OPENMA_WORK_TTL_SECONDS,
    sseKeepAliveMs: e.OPENMA_SSE_KEEPALIVE_MS,
    sseSendBufferBytes: e.OPENMA_SSE_SEND_BUFFER_BYTES,
    transfers: {
      bufferBytes: e.OPENMA_TRANSFER_BUFFER_BYTES,
      fileUploadLimitBytes: e.OPENMA_FILE_UPLOAD_LIMIT_BYTES,
      maxConcurrent: e.OPENMA_MAX_CONCURRENT_TRANSFERS,
    },
    logLevel: e.LOG_LEVEL,
    automation: {
      scheduler: e.OPENMA_SCHEDULER === "on",
      schedulerIntervalMs: e.OPENMA_SCHEDULER_INTERVAL_MS,
      webhooks: e.OPENMA_WEBHOOKS === "on",
      allowPrivateWebhookTargets: ["1", "true", "on"].includes(e.OPENMA_WEBHOOK_ALLOW_PRIVATE_TARGETS),
      webhookMaxAttempts: e.OPENMA_WEBHOOK_MAX_ATTEMPTS,
      webhookRetryBaseMs: e.OPENMA_WEBHOOK_RETRY_BASE_MS,
    },
    brain: {
      enabled: e.OPENMA_BRAIN === "on",
      selfHosted: e.OPENMA_SELF_HOSTED_BRAIN,
      concurrency: e.OPENMA_EXECUTION_CONCURRENCY,
      leaseTtlMs: e.OPENMA_EXECUTION_LEASE_TTL_MS,
      pollIntervalMs: e.OPENMA_EXECUTION_POLL_MS,
      maxAttempts: e.OPENMA_EXECUTION_MAX_ATTEMPTS,
      sandbox: e.OPENMA_SANDBOX ?? e.SANDBOX_PROVIDER ?? "auto",
      autoProvision: ["on", "1", "true"].includes(e.OPENMA_AUTO_PROVISION),
      egress: egressSettings(e),
      registries: { npm: e.OPENMA_PACKAGES_NPM_REGISTRY, pip: e.OPENMA_PACKAGES_PIP_INDEX_URL },
      sandboxes: {
        leaseTtlMs: e.OPENMA_SANDBOX_LEASE_TTL_MS,
        reapIntervalMs: e.OPENMA_SANDBOX_REAP_INTERVAL_MS,
        idleMs: e.OPENMA_SANDBOX_IDLE_MS,
      },
      warmPools: e.OPENMA_WARM_POOL ?? new Map(),
    },
    model: { baseUrl: e.OPENMA_MODEL_BASE_URL, apiKey: e.OPENMA_MODEL_API_KEY || e.ANTHROPIC_API_KEY },
    prices: pricesOf(e.OPENMA_PRICE_TABLE),
    contextWindows: configured(() => contextWindowsFromEnv(env)),
    webSearch: configured(() => webSearchProviderFromEnv(env)),
    blobs: blobEnvOf(e),
    runtimeHost: runtimeHostOf(e),
    activation: activationOf(e, e.OPENMA_WORKER_MAX_IDLE_MS),
    ops: {
      metrics: e.OPENMA_METRICS === "on",
      metricsToken: e.OPENMA_METRICS_TOKEN,
      drainTimeoutMs: e.OPENMA_DRAIN_TIMEOUT_MS,
      // OpenTelemetry's own variables (tracing.ts): traces are exported only when an OTLP endpoint is named.
      tracesEndpoint: tracesEndpoint(env),
    },
  };
}

function configured<T>(read: () => T): T {
  try {
    return read();
  } catch (err) {
    throw new Error(`invalid configuration: ${(err as Error).message}`);
  }
}

function pricesOf(file: string | undefined): PriceTable {
  try {
    return priceTableFromEnv({ OPENMA_PRICE_TABLE: file });
  } catch (err) {
    throw new Error(`invalid configuration: ${(err as Error).message}`);
  }
}

/**
 * The OTLP/HTTP traces endpoint OpenTelemetry's own variables name (the
 * signal-specific one as is, the general one plus `/v1/traces`), or undefined:
 * tracing off. `OTEL_TRACES_EXPORTER=none` turns it off too.
 */
export function tracesEndpoint(env: NodeJS.ProcessEnv): string | undefined {
  if (env.OTEL_TRACES_EXPORTER === "none") return undefined;
  if (env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) return env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT;
  if (env.OTEL_EXPORTER_OTLP_ENDPOINT) return `${env.OTEL_EXPORTER_OTLP_ENDPOINT.replace(/\/+$/, "")}/v1/traces`;
  return undefined;
}

function isSecretKey(text: string): boolean {
  try {
    decodeSecretKey(text);
    return true;
  } catch {
    return false;
  }
}

function runtimeHostOf(e: z.infer<typeof schema>): RuntimeHostConfig | undefined {
  if (e.OPENMA_RUNTIME_HOST_ENVIRONMENT_ID === undefined) return undefined;
  if (e.ANTHROPIC_ENVIRONMENT_KEY === undefined) {
    throw new Error("invalid configuration: OPENMA_RUNTIME_HOST_ENVIRONMENT_ID needs ANTHROPIC_ENVIRONMENT_KEY (the environment's key)");
  }
  const warmTarget = e.OPENMA_WARM_POOL?.get(e.OPENMA_RUNTIME_HOST_ENVIRONMENT_ID) ?? 0;
  const modelKey = e.OPENMA_MODEL_API_KEY || e.ANTHROPIC_API_KEY;
  if (e.OPENMA_RUNTIME_HOST_HARNESS === "acp" && (!e.OPENMA_MODEL_BASE_URL || !modelKey))
    throw new Error(
      "invalid configuration: OPENMA_RUNTIME_HOST_HARNESS=acp needs OPENMA_MODEL_BASE_URL and OPENMA_MODEL_API_KEY (the model gateway's upstream)",
    );
  return {
    environmentId: e.OPENMA_RUNTIME_HOST_ENVIRONMENT_ID,
    environmentKey: e.ANTHROPIC_ENVIRONMENT_KEY,
    sandbox: runtimeHostSandbox(e),
    concurrency: e.OPENMA_RUNTIME_HOST_CONCURRENCY,
    fenceTtlMs: e.OPENMA_RUNTIME_FENCE_TTL_MS,
    workerMaxIdleMs: e.OPENMA_WORKER_MAX_IDLE_MS,
    apiUrl: e.OPENMA_API_URL ?? `http://127.0.0.1:${e.PORT}`,
    publicUrl: e.OPENMA_PUBLIC_URL,
    warmPool:
      warmTarget > 0
        ? { target: warmTarget, leaseTtlMs: e.OPENMA_SANDBOX_LEASE_TTL_MS, reapIntervalMs: e.OPENMA_SANDBOX_REAP_INTERVAL_MS }
        : undefined,
    harness:
      e.OPENMA_RUNTIME_HOST_HARNESS === "acp"
        ? { type: "acp", model: { baseUrl: e.OPENMA_MODEL_BASE_URL as string, apiKey: modelKey as string } }
        : { type: "ama_worker" },
  };
}

/** OPENMA_RUNTIME_HOST_SANDBOX, else a cloud driver named by OPENMA_SANDBOX / SANDBOX_PROVIDER, else auto. */
function runtimeHostSandbox(e: z.infer<typeof schema>): RuntimeHostConfig["sandbox"] {
  if (e.OPENMA_RUNTIME_HOST_SANDBOX !== undefined) return e.OPENMA_RUNTIME_HOST_SANDBOX;
  const serve = e.OPENMA_SANDBOX ?? e.SANDBOX_PROVIDER;
  return (REMOTE_SANDBOX_DRIVERS as readonly string[]).includes(serve ?? "") ? (serve as RemoteSandboxName) : "auto";
}

const BLOB_VARS = [
  "OPENMA_BLOB_URL",
  "OPENMA_S3_ENDPOINT",
  "OPENMA_S3_REGION",
  "OPENMA_S3_ACCESS_KEY_ID",
  "OPENMA_S3_SECRET_ACCESS_KEY",
  "OPENMA_S3_FORCE_PATH_STYLE",
] as const;

function blobEnvOf(e: z.infer<typeof schema>): BlobEnv | undefined {
  if (BLOB_VARS.every((k) => e[k] === undefined)) return undefined;
  return Object.fromEntries(BLOB_VARS.map((k) => [k, e[k]]));
}
