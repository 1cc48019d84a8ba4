/**
 * ACP agent releases, installed from the npm registry into a host cache that
 * sandboxes mount read-only: nothing is downloaded inside a sandbox at run
 * time, and a Session's release (name, version, integrity) is pinned once.
 *
 * Cache layout: `<cache>/<package>@<version>/node_modules/...`, one plain
 * npm prefix per release (`OPENMA_ACP_AGENT_CACHE`, default
 * `~/.cache/openma/acp-agents`).
 */
import { execFile } from "node:child_process";
import { mkdir, readFile, rename, rm, stat, writeFile } from "node:fs/promises";
import { homedir } from "node:os";
import { join } from "node:path";

export interface AcpAgentRelease {
  /** The profile / registry id (`codex-acp`, `gemini`, ...). */
  id: string;
  package: string;
  version: string;
  /** The ACP entry point, relative to the release directory. */
  bin: string;
  /** Arguments that put the agent in ACP mode. */
  args: readonly string[];
  /** Whether `bin` is a JS file to run with node (else an executable). */
  node: boolean;
  /** Node major version the agent needs at least (when `node`, or for the programs it spawns). */
  nodeMajor?: number;
  /** Further packages (`name@version`) installed into the same prefix: a program the agent spawns. */
  with?: readonly string[];
}

/** Releases we know how to run; an agent or environment may pin another version of the same package. */
export const KNOWN_AGENT_RELEASES: readonly AcpAgentRelease[] = [
  {
    id: "codex-acp",
    package: "@zed-industries/codex-acp",
    version: "0.16.0",
    bin: "node_modules/@zed-industries/codex-acp-linux-x64/bin/codex-acp",
    args: [],
    node: false,
  },
  {
    id: "gemini",
    package: "@google/gemini-cli",
    version: "0.61.0",
    bin: "node_modules/@google/gemini-cli/bundle/gemini.js",
    args: ["--acp"],
    node: true,
  },
  {
    id: "claude-agent-acp",
    package: "@agentclientprotocol/claude-agent-acp",
    version: "0.101.0",
    bin: "node_modules/@agentclientprotocol/claude-agent-acp/dist/index.js",
    args: [],
    node: true,
  },
  {
    // A native (Bun-compiled) binary through optionalDependencies; its postinstall only links it.
    id: "opencode",
    package: "opencode-ai",
    version: "1.18.33",
    bin: "node_modules/opencode-linux-x64/bin/opencode",
    args: ["acp"],
    node: false,
  },
  {
    id: "qwen-code",
    package: "@qwen-code/qwen-code",
    version: "0.24.4",
    bin: "node_modules/@qwen-code/qwen-code/cli-entry.js",
    args: ["--acp"],
    node: true,
    nodeMajor: 22,
  },
  {
    // pi-acp spawns `pi --mode rpc` from PATH; pi needs Node 22.19 or later.
    id: "pi-acp",
    package: "pi-acp",
    version: "0.0.34",
    bin: "node_modules/pi-acp/dist/index.js",
    args: [],
    node: true,
    nodeMajor: 22,
    with: ["@earendil-works/pi-coding-agent@1.6.0"],
  },
  {
    // The npm loader only picks the platform package's native binary; run that directly.
    id: "copilot",
    package: "@github/copilot",
    version: "1.0.102",
    bin: "node_modules/@github/copilot-linux-x64/copilot",
    args: ["--acp", "--stdio"],
    node: false,
  },
];

export function agentCacheRoot(env: NodeJS.ProcessEnv = process.env): string {
  return env.OPENMA_ACP_AGENT_CACHE || join(homedir(), ".cache", "openma", "acp-agents");
}

export interface InstalledAgentRelease {
  release: AcpAgentRelease;
  /** Host directory of the release (bind it read-only into sandboxes). */
  dir: string;
  /** The registry's SHA-512 integrity of the package tarball, from the lockfile. */
  integrity: string;
}

const exists = (p: string) =>
  stat(p).then(
    () => true,
    () => false,
  );

/** The release's directory in the cache. */
export const releaseDir = (cacheRoot: string, release: AcpAgentRelease): string =>
  join(cacheRoot, `${release.package.replace("/", "+")}@${release.version}`);

export async function readInstalled(release: AcpAgentRelease, dir: string): Promise<InstalledAgentRelease | null> {
  if (!(await exists(join(dir, release.bin)))) return null;
  try {
    const lock = JSON.parse(await readFile(join(dir, "package-lock.json"), "utf8")) as {
      packages?: Record<string, { version?: string; integrity?: string }>;
    };
    const entry = lock.packages?.[`node_modules/${release.package}`];
    if (entry?.version !== release.version || !entry.integrity) return null;
    return { release, dir, integrity: entry.integrity };
  } catch {
    return null;
  }
}

/**
 * The installed release, installing it first when absent. Installs into a
 * scratch prefix and renames it into place, so a crash never leaves a
 * half-installed release that looks whole. Install scripts are not run.
 */
export async function ensureAgentRelease(release: AcpAgentRelease, cacheRoot = agentCacheRoot()): Promise<InstalledAgentRelease> {
  const dir = releaseDir(cacheRoot, release);
  const ready = await readInstalled(release, dir);
  if (ready) return ready;
  const scratch = `${dir}.installing-${process.pid}`;
  await rm(scratch, { recursive: true, force: true });
  await mkdir(scratch, { recursive: true });
  await writeFile(join(scratch, "package.json"), `${JSON.stringify({ name: "openma-acp-agent-release", private: true })}\n`);
  await new Promise<void>((resolve, reject) => {
    execFile(
      "npm",
      [
        "install",
        "--no-audit",
        "--no-fund",
        "--ignore-scripts",
        "--save-exact",
        `${release.package}@${release.version}`,
        ...(release.with ?? []),
      ],
      { cwd: scratch, maxBuffer: 16 * 1024 * 1024 },
      (error, _stdout, stderr) =>
        error ? reject(new Error(`npm install ${release.package}@${release.version} failed: ${stderr.slice(-2000)}`)) : resolve(),
    );
  });
  await rm(dir, { recursive: true, force: true });
  await rename(scratch, dir);
  const installed = await readInstalled(release, dir);
  if (!installed) throw new Error(`${release.package}@${release.version} installed without ${release.bin}`);
  return installed;
}

/** Releases already in the cache (for `openma doctor`). */
export async function listInstalledAgentReleases(cacheRoot = agentCacheRoot()): Promise<InstalledAgentRelease[]> {
  const out: InstalledAgentRelease[] = [];
  for (const release of KNOWN_AGENT_RELEASES) {
    const found = await readInstalled(release, releaseDir(cacheRoot, release));
    if (found) out.push(found);
  }
  return out;
}
