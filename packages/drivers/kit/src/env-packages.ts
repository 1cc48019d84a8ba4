/**
 * An environment's `packages` (config.packages of a cloud environment: apt,
 * cargo, gem, go, npm, pip) as a driver installs them: read from the
 * environment body, checked (names come from API users and end up in a
 * package manager's argv), hashed for a per-environment cache, and turned
 * into one shell program per manager.
 *
 * The programs take the names as positional arguments ("$@"), never spliced
 * into the script, and a name may not start with `-`, so no name becomes an
 * option or a shell word.
 */
import { createHash } from "node:crypto";

/** Installation order: apt first (it may bring the toolchains the others need). */
export const PACKAGE_MANAGERS = ["apt", "pip", "npm", "gem", "cargo", "go"] as const;
export type PackageManager = (typeof PACKAGE_MANAGERS)[number];

export type PackageSpec = Record<PackageManager, readonly string[]>;

/**
 * Letters, digits and the punctuation version specifiers use (`@scope/name@^1`, `pkg==1.2`, `pkg>=2,<3`,
 * `mod/path@v1`, `name:arch=ver`); first character a letter, digit or `@`. No spaces, quotes or shell syntax.
 */
const NAME = /^[A-Za-z0-9@][A-Za-z0-9@_.+~^=<>!*:/,%-]{0,255}$/;

/** Bumped when the programs below change: a cache built by other programs is not reused. */
const RECIPE_VERSION = "1";

export type PackagesOf = { ok: true; spec: PackageSpec | null } | { ok: false; message: string };

/**
 * The packages of an environment body (BetaEnvironment), or null when it has none to install (self-hosted,
 * sandbox-free, empty lists, or the environment is gone).
 */
export function packagesOf(environment: unknown): PackagesOf {
  const config = (environment as { config?: unknown } | null)?.config as { type?: unknown; packages?: unknown } | undefined;
  if (config?.type !== "cloud" || config.packages === null || typeof config.packages !== "object") return { ok: true, spec: null };
  const raw = config.packages as Record<string, unknown>;
  const spec = {} as Record<PackageManager, string[]>;
  let any = false;
  for (const manager of PACKAGE_MANAGERS) {
    const list = raw[manager] ?? [];
    if (!Array.isArray(list)) return { ok: false, message: `packages.${manager} must be a list of package names` };
    for (const name of list) {
      if (typeof name !== "string" || !NAME.test(name))
        return { ok: false, message: `packages.${manager}: ${JSON.stringify(name)} is not a package name this server installs` };
    }
    spec[manager] = [...list];
    any ||= list.length > 0;
  }
  return { ok: true, spec: any ? spec : null };
}

/** Stable across processes: the same packages on the same base image give the same hash. */
export function packagesHash(spec: PackageSpec, baseImageId: string): string {
  const canonical = JSON.stringify({ recipe: RECIPE_VERSION, base: baseImageId, ...spec }, [...PACKAGE_MANAGERS, "recipe", "base"]);
  return createHash("sha256").update(canonical).digest("hex").slice(0, 16);
}

/** Fails with a line naming the missing tool, so the session error says what the image lacks. */
const need = (tool: string) =>
  `command -v ${tool} >/dev/null 2>&1 || { echo "${tool} is not installed in the sandbox image" >&2; exit 127; }`;

/** `sh -c <program> sh <names...>`, as root in a build container of the base image. */
export const INSTALL_PROGRAMS: Record<PackageManager, string> = {
  apt: [
    need("apt-get"),
    "export DEBIAN_FRONTEND=noninteractive",
    "apt-get update -q",
    'apt-get install -y -q --no-install-recommends "$@"',
    "rm -rf /var/lib/apt/lists/* /var/cache/apt/archives/*.deb",
  ].join(" && "),
  // Debian's python refuses system-wide installs (PEP 668); this is the image's own layer, so it is allowed.
  pip: [need("python3"), 'python3 -m pip install --no-cache-dir --break-system-packages --retries 1 --timeout 20 "$@"'].join(" && "),
  npm: [need("npm"), 'npm install --global --no-audit --no-fund --no-update-notifier "$@"', "npm cache clean --force"].join(" && "),
  gem: [need("gem"), 'gem install --no-document "$@"'].join(" && "),
  cargo: [need("cargo"), 'CARGO_INSTALL_ROOT=/usr/local cargo install "$@"'].join(" && "),
  go: [need("go"), 'GOBIN=/usr/local/bin go install "$@"'].join(" && "),
};

/** What an install reports while it runs (logged by the caller; the failure also becomes a session error). */
export type InstallProgress =
  | { type: "cached"; image: string }
  | { type: "started"; manager: PackageManager; packages: readonly string[] }
  | { type: "finished"; manager: PackageManager }
  | { type: "ready"; image: string };

export type InstallResult = { ok: true; image: string; cached: boolean } | { ok: false; manager: PackageManager | null; message: string };

/** The `session.error` body of a failed install: terminal, the same packages would fail again. */
export function installSessionError(failure: { manager: PackageManager | null; message: string }): Record<string, unknown> {
  const which = failure.manager === null ? "the environment's packages" : `the environment's ${failure.manager} packages`;
  return { type: "unknown_error", message: `installing ${which} failed: ${failure.message}`, retry_status: { type: "terminal" } };
}
