/**
 * Ownership of `openma serve`'s per-session sandboxes (docs/serve-sandboxes.md,
 * ADR 0005). Before a sandbox is started its owner record is claimed in the
 * database and its lease held by the lease controller; the driver writes the
 * record's id (`openma.owner`), `openma.lane=serve` and this database's
 * deployment id on the sandbox. Every server of the deployment runs a
 * SandboxReaper over its driver: at start-up and every reap interval it
 * reaps sandboxes whose owner stopped renewing (a crash, `kill -9`), fell
 * idle by the stored deadline, or that no record names. A live owner's
 * sandbox is never reaped.
 */
import type { Logger } from "@openma/api";
import {
  hasSandboxInventory,
  type ManagedSandboxPort,
  type RuntimeOrphanPort,
  type RuntimeResourceScope,
  SANDBOX_OWNER_LABELS,
  type SandboxDriverStats,
  type SandboxOwnershipPort,
  SERVE_LANE,
} from "@openma/contract";
import { claimSandboxOwner, type SandboxOwnerHandle, SandboxReaper } from "@openma/host";
import type { Storage } from "@openma/storage";
import { SqlRuntimeOrphanStore } from "@openma/storage/orphans";
import { deploymentId, SqlSandboxOwnership } from "@openma/storage/sandbox-owners";
import { realScheduler, type Scheduler } from "@openma/time";
import type { DoctorCheck } from "./doctor.ts";

export interface SandboxOwnershipConfig {
  /** How long a crashed owner's sandboxes outlive it (OPENMA_SANDBOX_LEASE_TTL_MS). */
  leaseTtlMs: number;
  /** How often the reaper looks (OPENMA_SANDBOX_REAP_INTERVAL_MS); it also looks once at start-up. */
  reapIntervalMs: number;
}

export const DEFAULT_SANDBOX_OWNERSHIP: SandboxOwnershipConfig = { leaseTtlMs: 60_000, reapIntervalMs: 30_000 };

/** One sandbox's owner record, held while the sandbox is this server's (@openma/host's claimSandboxOwner). */
export type OwnerHandle = SandboxOwnerHandle;

export interface ServeOwnership {
  readonly deployment: string;
  /** Labels (or metadata) every serve-lane sandbox carries; drivers list only sandboxes carrying them. */
  readonly labels: Readonly<Record<string, string>>;
  claim(scope: RuntimeResourceScope, driver: string, idleMs: number): Promise<OwnerHandle>;
  /** Starts the reaper over a driver that can list what it owns (null when it cannot). */
  startReaper(sandbox: ManagedSandboxPort): SandboxReaper | null;
  stats(): Promise<SandboxDriverStats[]>;
}

export interface ServeOwnershipParts {
  port: SandboxOwnershipPort;
  orphans: RuntimeOrphanPort;
  deployment: string;
  config: SandboxOwnershipConfig;
  logger: Logger;
  scheduler?: Scheduler;
}

export async function openServeOwnership(storage: Storage, config: SandboxOwnershipConfig, logger: Logger): Promise<ServeOwnership> {
  return serveOwnership({
    port: new SqlSandboxOwnership(storage.db, { clock: realScheduler }),
    orphans: new SqlRuntimeOrphanStore(storage.db, { clock: realScheduler }),
    deployment: await deploymentId(storage.db),
    config,
    logger,
  });
}

export function serveOwnership(parts: ServeOwnershipParts): ServeOwnership {
  const { port, orphans, deployment, config, logger } = parts;
  const scheduler = parts.scheduler ?? realScheduler;
  const quiet = new AbortController().signal;

  return {
    deployment,
    labels: { [SANDBOX_OWNER_LABELS.lane]: SERVE_LANE, [SANDBOX_OWNER_LABELS.deployment]: deployment },
    claim: (scope, driver, idleMs) =>
      claimSandboxOwner({
        port,
        deployment,
        driver,
        scope,
        leaseTtlMs: config.leaseTtlMs,
        idleMs,
        scheduler,
        onLost: (end) => logger.warn({ session: scope.sessionId, end }, "lost the owner lease of a session sandbox"),
      }),
    startReaper(sandbox) {
      if (!hasSandboxInventory(sandbox)) return null;
      const reaper = new SandboxReaper({
        sandbox,
        ownership: port,
        orphans,
        deployment,
        driver: sandbox.capabilities.provider,
        scheduler,
        intervalMs: config.reapIntervalMs,
        onReport: (report) => {
          if (report.reaped + report.orphaned + report.cleared + report.orphans.reaped + report.orphans.deadLettered > 0)
            logger.info({ driver: sandbox.capabilities.provider, ...report }, "reaped session sandboxes of dead or idle owners");
        },
        onError: (err) => logger.warn({ driver: sandbox.capabilities.provider, err: String(err) }, "sandbox reaper pass failed"),
      });
      reaper.start();
      return reaper;
    },
    stats: () => port.stats({ deployment, signal: quiet }),
  };
}

/**
 * `openma doctor`'s `sandboxes` check: the deployment's session sandboxes per
 * driver (owned, idle, orphaned), read from the database the server would
 * use. A data dir without a database yet is skipped: the doctor never
 * creates one.
 */
export async function checkSandboxOwnership(env: NodeJS.ProcessEnv, timeoutMs: number): Promise<DoctorCheck> {
  const { existsSync } = await import("node:fs");
  const { join, resolve } = await import("node:path");
  const { isPostgresUrl, openStorage } = await import("@openma/storage");
  const dataDir = resolve(env.OPENMA_DATA_DIR || "./.openma");
  const databaseUrl = env.DATABASE_URL || undefined;
  if (!isPostgresUrl(databaseUrl) && !existsSync(join(dataDir, "openma.db")))
    return { id: "sandboxes", status: "skipped", detail: `no database in ${dataDir} yet`, disables: [], facts: {} };
  let storage: Storage | null = null;
  try {
    const opened = openStorage({ dataDir, databaseUrl, pgSchema: env.OPENMA_PG_SCHEMA || undefined });
    const timeout = new Promise<never>((_, reject) => {
      setTimeout(() => reject(new Error(`no answer within ${timeoutMs} ms`)), timeoutMs).unref();
    });
    storage = await Promise.race([opened, timeout]);
    const ownership = serveOwnership({
      port: new SqlSandboxOwnership(storage.db, { clock: realScheduler }),
      orphans: new SqlRuntimeOrphanStore(storage.db, { clock: realScheduler }),
      deployment: await deploymentId(storage.db),
      config: DEFAULT_SANDBOX_OWNERSHIP,
      logger: { info() {}, warn() {}, error() {} },
    });
    const stats = await ownership.stats();
    const orphaned = stats.reduce((n, s) => n + s.orphaned, 0);
    const detail =
      stats.length === 0
        ? "no session sandboxes"
        : stats.map((s) => `${s.driver}: ${s.owned} owned (${s.pooled} in warm pools), ${s.idle} idle, ${s.orphaned} orphaned`).join("; ");
    return {
      id: "sandboxes",
      status: orphaned > 0 ? "warn" : "ok",
      detail,
      disables: [],
      ...(orphaned > 0 ? { hint: "orphan records are sandboxes a reaper could not kill; see docs/serve-sandboxes.md" } : {}),
      facts: Object.fromEntries(
        stats.map((s) => [s.driver, [`owned=${s.owned}`, `pooled=${s.pooled}`, `idle=${s.idle}`, `orphaned=${s.orphaned}`]]),
      ),
    };
  } catch (err) {
    return { id: "sandboxes", status: "warn", detail: `the database did not answer: ${String(err)}`, disables: [], facts: {} };
  } finally {
    await storage?.close().catch(() => {});
  }
}
