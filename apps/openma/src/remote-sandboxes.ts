/**
 * Cloud sandbox drivers, selected by name: `OPENMA_SANDBOX=<driver>` (or the
 * seed's `SANDBOX_PROVIDER`) for `openma serve`'s sandbox tools and, unless
 * `OPENMA_RUNTIME_HOST_SANDBOX` says otherwise, for `openma runtime-host`.
 * Each driver reads its vendor's usual variables (the table below is what
 * `openma doctor` checks and the README documents). A driver package and
 * its SDK load only when that driver is selected.
 *
 * Adding a vendor: a driver package (a CloudProvider over its official SDK)
 * and one row here.
 */
import type { Logger } from "@openma/api";
import type { CloudflareEgressOptions } from "@openma/driver-cloudflare";
import type { RemoteRuntimeHostDriver, RemoteSandboxDriver } from "@openma/runtime-host";
import type { DoctorCheck } from "./doctor.ts";
import { type SandboxBackend, type ServeSandboxes, type ServeSandboxOptions, sessionSandboxes } from "./sandbox.ts";

export const REMOTE_SANDBOX_DRIVERS = [
  "e2b",
  "daytona",
  "sprites",
  "blaxel",
  "vercel",
  "modal",
  "superserve",
  "boxrun",
  "litebox",
  "cloudflare-bridge",
  "cloudflare",
] as const;
export type RemoteSandboxName = (typeof REMOTE_SANDBOX_DRIVERS)[number];

export function isRemoteSandbox(name: string | undefined): name is RemoteSandboxName {
  return (REMOTE_SANDBOX_DRIVERS as readonly string[]).includes(name ?? "");
}

type Env = Readonly<Record<string, string | undefined>>;

export interface RemoteDriverOptions {
  /** Labels on every runtime it creates (a runtime host's identity). */
  labels?: Readonly<Record<string, string>>;
  namePrefix?: string;
  /** A session's egress, for the one driver that enforces it at the provider (`cloudflare`); the others ignore it. */
  egress?: CloudflareEgressOptions;
}

interface RemoteDriverRow {
  title: string;
  /** Variables that must be set (one of each group). */
  required: readonly (readonly string[])[];
  optional: readonly string[];
  /** The variables whose presence means the driver is in use (default: all of the above); for variables two drivers share. */
  detectedBy?: readonly string[];
  open(env: Env, options: RemoteDriverOptions): Promise<RemoteSandboxDriver>;
  /** The doctor's own check, instead of a listing; such a driver is checked only when selected. */
  check?(env: Env): Promise<DoctorCheck>;
}

/** Each driver's configuration from the environment, or the variables it lacks. */
function configured<C>(result: C | { missing: string[] }): C {
  if (typeof result === "object" && result !== null && "missing" in result)
    throw new Error(`missing ${(result as { missing: string[] }).missing.join(", ")}`);
  return result as C;
}

export const REMOTE_DRIVERS: Record<RemoteSandboxName, RemoteDriverRow> = {
  e2b: {
    title: "E2B",
    required: [["E2B_API_KEY"]],
    optional: ["E2B_API_URL", "E2B_SANDBOX_URL", "E2B_DOMAIN", "OPENMA_E2B_TEMPLATE", "OPENMA_E2B_SANDBOX_TIMEOUT_MS"],
    async open(env, options) {
      const { createE2BDriver, e2bConfigFromEnv } = await import("@openma/driver-e2b");
      return createE2BDriver(configured(e2bConfigFromEnv(env)), options);
    },
  },
  daytona: {
    title: "Daytona",
    required: [["DAYTONA_API_KEY"]],
    optional: ["DAYTONA_API_URL", "DAYTONA_TARGET", "OPENMA_DAYTONA_SNAPSHOT", "OPENMA_DAYTONA_AUTO_STOP_MINUTES"],
    async open(env, options) {
      const { createDaytonaDriver, daytonaConfigFromEnv } = await import("@openma/driver-daytona");
      return createDaytonaDriver(configured(daytonaConfigFromEnv(env)), options);
    },
  },
  sprites: {
    title: "Fly Sprites",
    required: [["SPRITES_TOKEN", "SPRITE_TOKEN"]],
    optional: ["SPRITES_API_URL"],
    async open(env, options) {
      const { createSpritesDriver, spritesConfigFromEnv } = await import("@openma/driver-sprites");
      return createSpritesDriver(configured(spritesConfigFromEnv(env)), options);
    },
  },
  blaxel: {
    title: "Blaxel",
    required: [["BL_API_KEY"], ["BL_WORKSPACE"]],
    optional: ["BL_API_URL", "BL_RUN_URL", "BL_REGION", "BL_DISABLE_H2", "OPENMA_BLAXEL_IMAGE"],
    async open(env, options) {
      const { blaxelConfigFromEnv, createBlaxelDriver } = await import("@openma/driver-blaxel");
      return createBlaxelDriver(configured(blaxelConfigFromEnv(env)), options);
    },
  },
  vercel: {
    title: "Vercel Sandbox",
    // An access token with VERCEL_TEAM_ID and VERCEL_PROJECT_ID, or an OIDC token that names both.
    required: [["VERCEL_TOKEN", "VERCEL_OIDC_TOKEN"]],
    optional: ["VERCEL_TEAM_ID", "VERCEL_PROJECT_ID", "OPENMA_VERCEL_API_URL", "OPENMA_VERCEL_IMAGE", "OPENMA_VERCEL_SESSION_TIMEOUT_MS"],
    async open(env, options) {
      const { createVercelDriver, vercelConfigFromEnv } = await import("@openma/driver-vercel");
      return createVercelDriver(configured(vercelConfigFromEnv(env)), options);
    },
  },
  modal: {
    title: "Modal",
    required: [["MODAL_TOKEN_ID"], ["MODAL_TOKEN_SECRET"]],
    optional: [
      "MODAL_SERVER_URL",
      "MODAL_ENVIRONMENT",
      "OPENMA_MODAL_APP",
      "OPENMA_MODAL_IMAGE",
      "OPENMA_MODAL_VOLUME",
      "OPENMA_MODAL_SANDBOX_TIMEOUT_MS",
    ],
    async open(env, options) {
      const { createModalDriver, modalConfigFromEnv } = await import("@openma/driver-modal");
      return createModalDriver(configured(modalConfigFromEnv(env)), options);
    },
  },
  superserve: {
    title: "Superserve",
    required: [["SUPERSERVE_API_KEY"]],
    optional: ["SUPERSERVE_BASE_URL", "OPENMA_SUPERSERVE_DATA_PLANE_URL", "OPENMA_SUPERSERVE_DATA_PLANE_CA", "OPENMA_SUPERSERVE_TEMPLATE"],
    async open(env, options) {
      const { createSuperserveDriver, superserveConfigFromEnv } = await import("@openma/driver-superserve");
      return createSuperserveDriver(configured(superserveConfigFromEnv(env)), options);
    },
  },
  boxrun: {
    title: "BoxRun (BoxLite REST)",
    required: [["BOXLITE_REST_URL", "BOXLITE_API_URL"], ["BOXLITE_API_KEY"]],
    optional: ["BOXLITE_PATH_PREFIX", "OPENMA_BOXRUN_IMAGE"],
    async open(env, options) {
      const { boxRunConfigFromEnv, createBoxRunDriver } = await import("@openma/driver-boxrun");
      return createBoxRunDriver(configured(boxRunConfigFromEnv(env)), options);
    },
  },
  litebox: {
    title: "litebox (embedded BoxLite micro-VMs)",
    required: [],
    optional: ["BOXLITE_HOME", "OPENMA_LITEBOX_ROOTFS", "OPENMA_LITEBOX_IMAGE"],
    async open(env, options) {
      const { createLiteboxDriver, liteboxConfigFromEnv } = await import("@openma/driver-litebox");
      return createLiteboxDriver(liteboxConfigFromEnv(env), options);
    },
    // One real boot (bounded): whether a micro-VM starts on this host, with the runtime's own error when not.
    async check(env) {
      const { liteboxConfigFromEnv, probeLiteboxBoot } = await import("@openma/driver-litebox");
      const probe = await probeLiteboxBoot(liteboxConfigFromEnv(env));
      if (probe.booted)
        return {
          id: "sandbox:litebox",
          status: "ok",
          detail: `litebox: a micro-VM booted in ${probe.ms} ms`,
          disables: [],
          facts: { booted: true },
        };
      return {
        id: "sandbox:litebox",
        status: "missing",
        detail: `litebox: no micro-VM boots on this host: ${probe.error}`,
        disables: ["OPENMA_SANDBOX=litebox"],
        hint: "run on a host whose KVM can boot libkrun's guest kernel (not a nested PVM guest)",
        facts: { booted: false },
      };
    },
  },
  "cloudflare-bridge": {
    title: "Cloudflare Sandbox Bridge",
    // The bridge Worker's origin and the Bearer token it was deployed with.
    required: [["CLOUDFLARE_BRIDGE_URL"], ["SANDBOX_API_KEY"]],
    optional: [],
    // SANDBOX_API_KEY is also the cloudflare driver's.
    detectedBy: ["CLOUDFLARE_BRIDGE_URL"],
    async open(env, options) {
      const { cloudflareBridgeConfigFromEnv, createCloudflareBridgeDriver } = await import("@openma/driver-cloudflare-bridge");
      return createCloudflareBridgeDriver(configured(cloudflareBridgeConfigFromEnv(env)), options);
    },
  },
  cloudflare: {
    title: "Cloudflare (OpenMA's Worker)",
    // Our Worker's origin (packages/cloudflare-worker, docs/cloudflare-worker.md) and the Bearer token it was deployed with.
    required: [["CLOUDFLARE_WORKER_URL"], ["SANDBOX_API_KEY"]],
    optional: [],
    detectedBy: ["CLOUDFLARE_WORKER_URL"],
    async open(env, options) {
      const { cloudflareConfigFromEnv, createCloudflareDriver } = await import("@openma/driver-cloudflare");
      return createCloudflareDriver(configured(cloudflareConfigFromEnv(env)), options);
    },
  },
};

/** Required variables this environment lacks for `name` (each group named by its first variable). */
export function missingVariables(name: RemoteSandboxName, env: Env): string[] {
  return REMOTE_DRIVERS[name].required.filter((group) => !group.some((v) => env[v])).map((group) => group.join(" or "));
}

export function openRemoteDriver(name: RemoteSandboxName, env: Env, options: RemoteDriverOptions = {}): Promise<RemoteSandboxDriver> {
  const missing = missingVariables(name, env);
  if (missing.length > 0) return Promise.reject(new Error(`the ${name} sandbox driver needs ${missing.join(", ")}`));
  return REMOTE_DRIVERS[name].open(env, options);
}

/**
 * `openma serve`'s per-session sandboxes on a cloud driver. The session's
 * `/workspace` lives in its remote runtime (a host directory cannot be bound
 * into it), so it lasts as long as that runtime: idle termination and
 * archiving end it. Durable workspaces are the runtime host's (checkpointed
 * and restored under a fence).
 */
export async function openRemoteServeSandboxes(
  name: RemoteSandboxName,
  env: Env,
  options: Pick<ServeSandboxOptions, "dataDir" | "logger" | "scheduler" | "idleMs" | "ownership" | "instrument" | "warmPools"> & {
    egress?: CloudflareEgressOptions | undefined;
  },
): Promise<ServeSandboxes> {
  const driver = await openRemoteDriver(name, env, {
    namePrefix: "openma-serve",
    labels: options.ownership?.labels,
    egress: options.egress,
  });
  const backend: SandboxBackend = { name, sandbox: driver, toolSandbox: (lease) => driver.toolSandbox(lease), needsTraversal: false };
  options.logger.info({ sandbox: name }, "sandbox tools run in per-session cloud sandboxes");
  const sandboxes = sessionSandboxes(backend, options);
  return {
    ...sandboxes,
    async close() {
      await sandboxes.close();
      await driver.close();
    },
  };
}

/** The runtime host's driver for a cloud provider; its workers reach the control plane at `workerApiUrl`. */
export function remoteRuntimeHostDriver(name: RemoteSandboxName, env: Env, workerApiUrl: string): RemoteRuntimeHostDriver {
  // Where egress is enforced (cloudflare), the worker inside must still reach the control plane; nothing else, no credential yet.
  const controlPlane = new URL(workerApiUrl).hostname;
  const egress: CloudflareEgressOptions = {
    egressConfig: async () => ({ networking: { type: "limited", allowed_hosts: [controlPlane] }, credentials: [] }),
  };
  return { type: "remote", name, workerApiUrl, open: (labels) => openRemoteDriver(name, env, { labels, namePrefix: "openma-rh", egress }) };
}

/**
 * Doctor checks for the cloud drivers in use: selected by a sandbox
 * variable, or with credentials present. A complete configuration is probed
 * with one real listing through the vendor's SDK.
 */
export async function checkRemoteSandboxes(env: Env, timeoutMs: number, logger?: Logger): Promise<DoctorCheck[]> {
  const selected = new Set([env.OPENMA_SANDBOX, env.SANDBOX_PROVIDER, env.OPENMA_RUNTIME_HOST_SANDBOX].filter(isRemoteSandbox));
  const checks: DoctorCheck[] = [];
  for (const name of REMOTE_SANDBOX_DRIVERS) {
    const row = REMOTE_DRIVERS[name];
    const present = row.check === undefined && (row.detectedBy ?? [...row.required.flat(), ...row.optional]).some((v) => env[v]);
    if (!selected.has(name) && !present) continue;
    const id = `sandbox:${name}` as const;
    const disables = [`OPENMA_SANDBOX=${name}`];
    const missing = missingVariables(name, env);
    if (missing.length > 0) {
      checks.push({
        id,
        status: "missing",
        detail: `${row.title}: ${missing.join(", ")} not set`,
        disables,
        hint: `set ${missing.join(", ")}`,
        facts: { selected: selected.has(name) },
      });
      continue;
    }
    checks.push(row.check ? await row.check(env) : await probe(name, env, timeoutMs, logger));
  }
  return checks;
}

async function probe(name: RemoteSandboxName, env: Env, timeoutMs: number, logger?: Logger): Promise<DoctorCheck> {
  const row = REMOTE_DRIVERS[name];
  const id = `sandbox:${name}` as const;
  let driver: RemoteSandboxDriver | null = null;
  try {
    driver = await openRemoteDriver(name, env);
    const listed = await Promise.race([
      driver.listOwned({ signal: AbortSignal.timeout(timeoutMs) }),
      new Promise<{ type: "failed"; error: string; retryable: true }>((resolve) =>
        setTimeout(() => resolve({ type: "failed", error: `no answer within ${timeoutMs} ms`, retryable: true }), timeoutMs).unref(),
      ),
    ]);
    if (listed.type === "failed") {
      return {
        id,
        status: "warn",
        detail: `${row.title}: configured, but the provider did not answer: ${listed.error}`,
        disables: [`OPENMA_SANDBOX=${name}`],
        facts: {},
      };
    }
    return {
      id,
      status: "ok",
      detail: `${row.title}: reachable; ${listed.runtimes.length} runtime(s) owned by OpenMA`,
      disables: [],
      facts: { owned: listed.runtimes.length },
    };
  } catch (err) {
    return {
      id,
      status: "warn",
      detail: `${row.title}: ${err instanceof Error ? err.message : String(err)}`,
      disables: [`OPENMA_SANDBOX=${name}`],
      facts: {},
    };
  } finally {
    await driver?.close().catch((err: unknown) => logger?.warn({ err: String(err) }, "closing a probed driver failed"));
  }
}
