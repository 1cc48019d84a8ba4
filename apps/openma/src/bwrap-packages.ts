/**
 * An environment's `packages` on the bubblewrap driver: npm and pip packages
 * are installed into a prefix directory per environment and packages hash
 * (`<dataDir>/env-packages/<environment>-<hash>`), inside a bubblewrap
 * sandbox of that session, so the install goes out through the session's
 * egress gateway under the environment's networking. The finished prefix is
 * given to root and bound read-only at /opt/openma/packages in every later
 * sandbox of the environment, with PATH, NODE_PATH and PYTHONPATH pointing
 * into it; the next session finds it complete and installs nothing.
 *
 * apt (and cargo, gem, go) are refused with the reason: a bubblewrap
 * sandbox shares the host's read-only `/usr` and never runs as root, so a
 * system package manager has nowhere to install to.
 */
import { randomBytes } from "node:crypto";
import { existsSync } from "node:fs";
import { chmod, mkdir, rename, rm, stat, writeFile } from "node:fs/promises";
import { join } from "node:path";
import {
  type ExecResult,
  type FenceIdentity,
  type ManagedRuntimePlan,
  type ManagedSandboxLease,
  type ManagedSandboxPort,
  type SandboxRequest,
  type ToolSandboxPort,
  WORKSPACE_MOUNT_PATH,
} from "@openma/contract";
import { chownTree } from "@openma/driver-kit/chown-tree";
import { type InstallProgress, type PackageManager, type PackageSpec, packagesHash } from "@openma/driver-kit/env-packages";

/** Where a sandbox sees its environment's prefix. */
export const SANDBOX_PACKAGES_DIR = "/opt/openma/packages";
/** Where the install sandbox builds it: its workspace (the driver gives that to the sandbox's uid). */
const BUILD_DIR = "/workspace";

/** What this driver installs, in order. */
const MANAGERS = ["pip", "npm"] as const satisfies readonly PackageManager[];

/** Why the environment's packages cannot be installed on bubblewrap (`online`: sandboxes have a gateway), or null. */
export function bubblewrapPackagesRefusal(spec: PackageSpec, online: boolean): { manager: PackageManager | null; message: string } | null {
  if (spec.apt.length > 0)
    return {
      manager: "apt",
      message:
        "the bubblewrap driver cannot install apt packages: apt writes the system (/usr, /etc) as root, and a bubblewrap sandbox shares the host's read-only /usr and never runs as root; use the Docker driver (OPENMA_SANDBOX=docker), which builds a package layer",
    };
  for (const manager of ["cargo", "gem", "go"] as const)
    if (spec[manager].length > 0)
      return {
        manager,
        message: `the bubblewrap driver installs npm and pip packages only (into a per-environment prefix); ${manager} packages need the Docker driver (OPENMA_SANDBOX=docker)`,
      };
  // Installs go out through the sandbox's gateway; without one they would only wait for a network that never comes.
  if (!online)
    return { manager: null, message: "environment packages are installed through the egress gateway, which is off (OPENMA_EGRESS=off)" };
  return null;
}

/** Operator settings: the registries installs use (default: the package managers' own). */
export interface PackageRegistries {
  npm?: string | undefined;
  pip?: string | undefined;
}

const need = (tool: string) =>
  `command -v ${tool} >/dev/null 2>&1 || { echo "${tool} is not installed on this host (the bubblewrap sandbox uses the host's tools)" >&2; exit 127; }`;

/** `sh -c <program> sh <names...>` as the sandbox user; names are positional arguments, never script text. */
const PROGRAMS: Record<(typeof MANAGERS)[number], string> = {
  pip: [
    need("python3"),
    `python3 -m pip install --no-cache-dir --disable-pip-version-check --target ${BUILD_DIR}/pip --retries 1 --timeout 20 "$@"`,
  ].join(" && "),
  npm: [need("npm"), `npm install --global --prefix ${BUILD_DIR}/npm --no-audit --no-fund --no-update-notifier "$@"`].join(" && "),
};

function programEnv(manager: (typeof MANAGERS)[number], registries: PackageRegistries): Record<string, string> {
  if (manager === "npm") return { npm_config_cache: "/tmp/npm-cache", ...(registries.npm ? { npm_config_registry: registries.npm } : {}) };
  if (!registries.pip) return {};
  const url = new URL(registries.pip);
  // pip ignores a plain-HTTP index unless told to trust it; the operator named this one.
  return { PIP_INDEX_URL: registries.pip, ...(url.protocol === "http:" ? { PIP_TRUSTED_HOST: url.host } : {}) };
}

/** The variables a sandbox over the prefix gets (PATH is the driver's own PATH with the prefix's bins first). */
export function prefixEnv(basePath: string): Record<string, string> {
  return {
    PATH: `${SANDBOX_PACKAGES_DIR}/npm/bin:${SANDBOX_PACKAGES_DIR}/pip/bin:${basePath}`,
    NODE_PATH: `${SANDBOX_PACKAGES_DIR}/npm/lib/node_modules`,
    PYTHONPATH: `${SANDBOX_PACKAGES_DIR}/pip`,
  };
}

/** Runs one command in an install sandbox whose workspace is `hostDir` (acquired and terminated by the caller). */
export type InstallSandbox = (
  hostDir: string,
  work: (exec: (command: string[], env: Record<string, string>) => Promise<ExecResult>) => Promise<InstallOutcome>,
) => Promise<InstallOutcome>;

type InstallOutcome = { ok: true } | { ok: false; manager: PackageManager | null; message: string };

export type PrefixResult = { ok: true; dir: string; cached: boolean } | { ok: false; manager: PackageManager | null; message: string };

const SAFE_ID = /^[A-Za-z0-9_-]{1,128}$/;
/** Bumped when the programs above change: a prefix built by other programs is not reused. */
const RECIPE = "bubblewrap-prefix-1";
const TAIL = 2000;

/** Installs in flight in this process, so two sessions of one environment share one install. */
const inFlight = new Map<string, Promise<PrefixResult>>();

export function ensurePackagePrefix(input: {
  dataDir: string;
  environmentId: string;
  spec: PackageSpec;
  registries: PackageRegistries;
  installSandbox: InstallSandbox;
  onProgress: (progress: InstallProgress) => void;
}): Promise<PrefixResult> {
  if (!SAFE_ID.test(input.environmentId))
    return Promise.resolve({ ok: false, manager: null, message: "the environment id cannot name a directory" });
  const dir = join(input.dataDir, "env-packages", `${input.environmentId}-${packagesHash(input.spec, RECIPE)}`);
  const running = inFlight.get(dir);
  if (running) return running;
  const done = build(dir, input).finally(() => inFlight.delete(dir));
  inFlight.set(dir, done);
  return done;
}

/** Search (not list) permission for others: bwrap binds as the sandbox's unprivileged host uid, which must reach the path. */
export async function makeTraversable(dir: string): Promise<void> {
  const mode = (await stat(dir)).mode & 0o7777;
  if ((mode & 0o011) !== 0o011) await chmod(dir, mode | 0o011);
}

async function build(dir: string, input: Parameters<typeof ensurePackagePrefix>[0]): Promise<PrefixResult> {
  if (existsSync(join(dir, ".complete"))) {
    input.onProgress({ type: "cached", image: dir });
    return { ok: true, dir, cached: true };
  }
  const root = join(input.dataDir, "env-packages");
  await makeTraversable(input.dataDir);
  await mkdir(root, { recursive: true, mode: 0o711 });
  // A fresh directory per attempt: a crashed or failed install never leaves a prefix that looks complete.
  const tmp = `${dir}.tmp-${randomBytes(6).toString("hex")}`;
  await mkdir(tmp, { mode: 0o700 });
  try {
    const outcome = await input.installSandbox(tmp, async (exec) => {
      for (const manager of MANAGERS) {
        const names = input.spec[manager];
        if (names.length === 0) continue;
        input.onProgress({ type: "started", manager, packages: names });
        const result = await exec(["sh", "-c", PROGRAMS[manager], "sh", ...names], programEnv(manager, input.registries));
        if (result.type !== "exited") return { ok: false, manager, message: `${manager} did not finish (${result.type})` };
        if (result.exitCode !== 0) {
          const stderr = Buffer.from(result.stderr).toString("utf8").trim().slice(-TAIL);
          return { ok: false, manager, message: `${manager} exited with ${result.exitCode}: ${stderr}` };
        }
        input.onProgress({ type: "finished", manager });
      }
      return { ok: true };
    });
    if (!outcome.ok) return outcome;
    // Root's now, read-only in every sandbox; readable and traversable by the sandboxes' uids.
    await chownTree(tmp, 0, 0);
    await chmod(tmp, 0o755);
    await writeFile(join(tmp, ".complete"), `${new Date().toISOString()}\n`, { mode: 0o644 });
    try {
      await rename(tmp, dir);
    } catch (err) {
      // Another process finished the same prefix first: use its copy.
      if (!existsSync(join(dir, ".complete"))) throw err;
    }
    input.onProgress({ type: "ready", image: dir });
    return { ok: true, dir, cached: false };
  } finally {
    await rm(tmp, { recursive: true, force: true });
  }
}

/**
 * A throwaway sandbox of the session (same scope, so the same gateway policy) whose workspace is `hostDir`,
 * for installing the environment's packages there; terminated whatever `work` returns or throws. It carries
 * the session's owner record (`ownerId`), so a reaper leaves it alone while this server holds that lease and
 * ends it when a crash lets the lease lapse; its own idempotency key keeps it apart from the session's sandbox.
 */
export async function withInstallSandbox<T>(
  sandbox: ManagedSandboxPort & { toolSandbox(lease: ManagedSandboxLease): ToolSandboxPort },
  request: SandboxRequest,
  ownerId: string,
  plan: ManagedRuntimePlan,
  hostDir: string,
  work: (exec: (command: string[], env: Record<string, string>) => Promise<ExecResult>) => Promise<T>,
): Promise<T> {
  const scope = { environmentId: request.environmentId, sessionId: request.sessionId };
  const key = `pkg-${randomBytes(6).toString("hex")}`;
  const fence: FenceIdentity = { scope, ownerId, generation: 1, expiresAt: Date.now() + 86_400_000 };
  const acquired = await sandbox.acquire({
    scope,
    fence,
    plan,
    workspace: { bindingId: `ws-${key}`, strategy: "ephemeral", mountPath: WORKSPACE_MOUNT_PATH, metadata: { hostPath: hostDir } },
    outputs: null,
    idempotencyKey: key,
    signal: request.signal,
  });
  if (acquired.type !== "acquired") throw new Error(`the package install sandbox could not be started: ${acquired.reason}`);
  const lease = acquired.lease;
  try {
    const port = sandbox.toolSandbox(lease);
    return await work((command, env) => port.exec({ command, env, timeoutMs: 15 * 60_000, signal: request.signal }));
  } finally {
    await sandbox.terminate({ scope, fence, lease, reason: "completed", signal: AbortSignal.timeout(30_000) }).catch(() => {});
  }
}
