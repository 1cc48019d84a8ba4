/**
 * `openma doctor`: what this machine has for running OpenMA, and what each
 * missing part disables. Exit code 0 when the embedded default can run:
 * Node >= 24, SQLite, and a sandbox driver (bubblewrap, else Docker; the
 * server fails closed without either). `--json` prints the same report as
 * one JSON object.
 *
 * Every probe is bounded by a timeout and reports a value; nothing here
 * throws on a missing component. The Docker probe talks to the Engine API
 * over its socket directly, so it works without any driver package loaded.
 * DATABASE_URL is never printed (it may carry a password).
 */
import { execFile } from "node:child_process";
import { access, readFile } from "node:fs/promises";
import { request } from "node:http";
import { CgroupV1 } from "@openma/driver-bubblewrap";
import { MIN_NODE_MAJOR } from "./node-version.ts";

export type CheckStatus = "ok" | "missing" | "warn" | "skipped";

export interface DoctorCheck {
  id: "node" | "sqlite" | "postgres" | "bubblewrap" | "docker" | "images" | "cgroups" | "sandboxes" | "acp" | `sandbox:${string}`;
  status: CheckStatus;
  /** One line on what was found. */
  detail: string;
  /** Features unavailable because of this check (empty when fine). */
  disables: string[];
  /** How to fix it, when we know. */
  hint?: string;
  /** Machine-readable facts (versions, paths, flags). */
  facts: Record<string, string | number | boolean | string[] | null>;
}

export interface DoctorReport {
  ok: boolean;
  embeddedDefault: { runnable: boolean; sandbox: "bubblewrap" | "docker" | null; reason: string };
  checks: DoctorCheck[];
}

export interface DoctorOptions {
  env?: NodeJS.ProcessEnv;
  dockerSocket?: string;
  imageManifest?: string;
  timeoutMs?: number;
}

const PROVISION = "run `npm run provision` (as root)";

interface Run {
  ok: boolean;
  stdout: string;
  stderr: string;
}

function run(file: string, args: string[], timeoutMs: number): Promise<Run> {
  return new Promise((resolve) => {
    execFile(
      file,
      args,
      { timeout: timeoutMs, encoding: "utf8", env: { PATH: process.env.PATH ?? "/usr/bin:/bin" } },
      (err, stdout, stderr) => {
        resolve({ ok: err === null, stdout: String(stdout), stderr: String(stderr || (err ? err.message : "")) });
      },
    );
  });
}

function message(err: unknown): string {
  return (err instanceof Error ? err.message : String(err)).replace(/\s+/g, " ").trim();
}

function check(id: DoctorCheck["id"], status: CheckStatus, detail: string, extra: Partial<DoctorCheck> = {}): DoctorCheck {
  return { id, status, detail, disables: [], facts: {}, ...extra };
}

export function checkNode(version: string = process.versions.node, execPath: string = process.execPath): DoctorCheck {
  const major = Number(version.split(".")[0]);
  const facts = { version, execPath };
  if (major >= MIN_NODE_MAJOR) return check("node", "ok", `v${version} (${execPath})`, { facts });
  return check("node", "missing", `v${version} (${execPath}) is too old (need >= ${MIN_NODE_MAJOR})`, {
    disables: [`everything: OpenMA requires Node.js ${MIN_NODE_MAJOR} or newer`],
    hint: "run through `npm start` / `npx openma` (npm install brings Node 24 into node_modules/.bin), or install Node.js 24 LTS",
    facts,
  });
}

export async function checkSqlite(): Promise<DoctorCheck> {
  try {
    const { default: Database } = await import("better-sqlite3");
    const db = new Database(":memory:");
    try {
      const row = db.prepare("select sqlite_version() as v").get() as { v: string };
      return check("sqlite", "ok", `SQLite ${row.v} (better-sqlite3)`, { facts: { version: row.v } });
    } finally {
      db.close();
    }
  } catch (err) {
    return check("sqlite", "missing", `better-sqlite3 does not load: ${message(err)}`, {
      disables: ["the embedded default storage (SQLite); only DATABASE_URL (PostgreSQL) remains"],
      hint: "run `npm ci` (better-sqlite3 builds a native module)",
    });
  }
}

export async function checkPostgres(databaseUrl: string | undefined, timeoutMs: number): Promise<DoctorCheck> {
  if (!databaseUrl) return check("postgres", "skipped", "DATABASE_URL is not set: the embedded default uses SQLite");
  // Never echo the URL, even inside a driver error.
  const scrub = (text: string) => text.split(databaseUrl).join("[DATABASE_URL]");
  try {
    const { default: pg } = await import("pg");
    const client = new pg.Client({ connectionString: databaseUrl, connectionTimeoutMillis: timeoutMs, statement_timeout: timeoutMs });
    client.on("error", () => {});
    await client.connect();
    try {
      const { rows } = await client.query<{ v: string }>("select current_setting('server_version') as v");
      const version = rows[0]?.v ?? "unknown";
      return check("postgres", "ok", `PostgreSQL ${version} reachable at DATABASE_URL`, { facts: { version } });
    } finally {
      await client.end().catch(() => {});
    }
  } catch (err) {
    return check("postgres", "warn", `DATABASE_URL is set but PostgreSQL is not reachable: ${scrub(message(err))}`, {
      disables: ["PostgreSQL storage: `openma serve` with this DATABASE_URL will not start (unset it to use SQLite)"],
      hint: "start PostgreSQL or fix DATABASE_URL",
    });
  }
}

export async function checkBubblewrap(timeoutMs: number): Promise<DoctorCheck> {
  const version = await run("bwrap", ["--version"], timeoutMs);
  if (!version.ok) {
    return check("bubblewrap", "missing", "bwrap is not installed", {
      disables: ["the bubblewrap sandbox driver (the embedded default's first choice)"],
      hint: PROVISION,
    });
  }
  const ver = version.stdout.trim().replace(/^bubblewrap\s+/, "");
  const base = ["--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev", "--die-with-parent"];
  const user = await run("bwrap", ["--unshare-user", ...base, "true"], timeoutMs);
  // In a fresh network namespace only loopback may exist.
  const net = await run("bwrap", ["--unshare-net", ...base, "cat", "/proc/net/dev"], timeoutMs);
  const netIsolated =
    net.ok &&
    net.stdout
      .split("\n")
      .slice(2)
      .map((line) => line.split(":")[0]?.trim())
      .filter(Boolean)
      .every((name) => name === "lo");
  const all = await run(
    "bwrap",
    ["--unshare-user", "--unshare-net", "--unshare-pid", "--unshare-ipc", "--unshare-uts", ...base, "true"],
    timeoutMs,
  );
  const facts = { version: ver, userNamespaces: user.ok, networkNamespaces: netIsolated, allNamespaces: all.ok };
  const detail = `bubblewrap ${ver}; user namespaces ${user.ok ? "work" : "fail"}; network namespaces ${netIsolated ? "work" : "fail"}`;
  if (all.ok && netIsolated) return check("bubblewrap", "ok", detail, { facts });
  return check("bubblewrap", "missing", `${detail}: ${(all.ok ? net.stderr : all.stderr).trim().split("\n")[0] ?? ""}`, {
    disables: ["the bubblewrap sandbox driver (it needs user, pid, ipc, uts and network namespaces)"],
    hint: "enable unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1 / user.max_user_namespaces > 0) or run as root",
    facts,
  });
}

function dockerGet(socketPath: string, path: string, timeoutMs: number): Promise<{ status: number; body: unknown }> {
  return new Promise((resolve, reject) => {
    const req = request({ socketPath, path, method: "GET", timeout: timeoutMs, headers: { Host: "docker" } }, (res) => {
      const chunks: Buffer[] = [];
      res.on("data", (chunk: Buffer) => chunks.push(chunk));
      res.on("end", () => {
        const text = Buffer.concat(chunks).toString("utf8");
        let body: unknown = text;
        try {
          body = JSON.parse(text);
        } catch {
          // Plain-text error bodies stay text.
        }
        resolve({ status: res.statusCode ?? 0, body });
      });
      res.on("error", reject);
    });
    req.on("timeout", () => req.destroy(new Error(`no answer within ${timeoutMs} ms`)));
    req.on("error", reject);
    req.end();
  });
}

export async function checkDocker(socketPath: string, timeoutMs: number): Promise<DoctorCheck> {
  const disables = ["the node-docker sandbox driver (the embedded default's fallback when bubblewrap is unusable)"];
  try {
    await access(socketPath);
  } catch {
    return check("docker", "missing", `no Docker socket at ${socketPath}`, { disables, hint: PROVISION, facts: { socket: socketPath } });
  }
  try {
    const [version, info] = await Promise.all([dockerGet(socketPath, "/version", timeoutMs), dockerGet(socketPath, "/info", timeoutMs)]);
    if (version.status !== 200 || info.status !== 200) throw new Error(`engine answered HTTP ${version.status}/${info.status}`);
    const v = version.body as { Version?: string; ApiVersion?: string };
    const i = info.body as { Driver?: string; CgroupVersion?: string; CgroupDriver?: string };
    const facts = {
      socket: socketPath,
      serverVersion: v.Version ?? null,
      apiVersion: v.ApiVersion ?? null,
      storageDriver: i.Driver ?? null,
      cgroupVersion: i.CgroupVersion ?? null,
    };
    return check("docker", "ok", `Docker ${v.Version} (API ${v.ApiVersion}), storage driver ${i.Driver}, socket ${socketPath}`, { facts });
  } catch (err) {
    return check("docker", "missing", `the Docker Engine at ${socketPath} does not answer: ${message(err)}`, {
      disables,
      hint: PROVISION,
      facts: { socket: socketPath },
    });
  }
}

interface ImageManifest {
  tag: string;
  /** `node`: the version build-images.sh ran inside the rootfs (absent in manifests from before Node 24). */
  base: { image: string; rootfs: string; node?: string };
  busybox: { image: string; rootfs: string };
}

async function exists(path: string): Promise<boolean> {
  try {
    await access(path);
    return true;
  } catch {
    return false;
  }
}

/**
 * The Node a sandbox runs: executed in the base rootfs through bwrap (what the
 * bubblewrap driver would start), and the label the image builder put on the
 * Docker image. Null when that path is unavailable.
 */
async function sandboxNodeVersions(
  manifest: ImageManifest,
  rootfsPresent: boolean,
  image: { socketPath: string; loaded: boolean },
  timeoutMs: number,
): Promise<{ rootfs: string | null; image: string | null }> {
  let rootfs: string | null = null;
  if (rootfsPresent) {
    const ran = await run(
      "bwrap",
      [
        "--ro-bind",
        manifest.base.rootfs,
        "/",
        "--proc",
        "/proc",
        "--dev",
        "/dev",
        "--unshare-all",
        "--die-with-parent",
        "/usr/local/bin/node",
        "--version",
      ],
      timeoutMs,
    );
    rootfs = ran.ok ? ran.stdout.trim() : null;
  }
  let label: string | null = null;
  if (image.loaded) {
    const inspect = await dockerGet(image.socketPath, `/images/${encodeURIComponent(manifest.base.image)}/json`, timeoutMs).catch(
      () => null,
    );
    const labels = (inspect?.body as { Config?: { Labels?: Record<string, string> | null } } | undefined)?.Config?.Labels;
    label = labels?.["openma.node.version"] ?? null;
  }
  return { rootfs, image: label };
}

export async function checkImages(manifestPath: string, socketPath: string, dockerUp: boolean, timeoutMs: number): Promise<DoctorCheck> {
  let manifest: ImageManifest;
  try {
    manifest = JSON.parse(await readFile(manifestPath, "utf8")) as ImageManifest;
    if (typeof manifest.base?.image !== "string" || typeof manifest.busybox?.image !== "string") throw new Error("malformed");
  } catch (err) {
    return check("images", "missing", `no sandbox image manifest at ${manifestPath} (${message(err)})`, {
      disables: ["the node-docker driver (no base image) and the prebuilt bubblewrap rootfs"],
      hint: `${PROVISION} (builds the images with scripts/build-images.sh)`,
      facts: { manifest: manifestPath },
    });
  }
  const facts: DoctorCheck["facts"] = {
    manifest: manifestPath,
    tag: manifest.tag,
    baseImage: manifest.base.image,
    busyboxImage: manifest.busybox.image,
  };
  facts.baseRootfs = (await exists(manifest.base.rootfs)) ? manifest.base.rootfs : null;
  facts.busyboxRootfs = (await exists(manifest.busybox.rootfs)) ? manifest.busybox.rootfs : null;
  const loaded: string[] = [];
  if (dockerUp) {
    for (const image of [manifest.base.image, manifest.busybox.image]) {
      const found = await dockerGet(socketPath, `/images/${encodeURIComponent(image)}/json`, timeoutMs).catch(() => ({ status: 0 }));
      if (found.status === 200) loaded.push(image);
    }
  }
  facts.loaded = loaded;
  const nodes = await sandboxNodeVersions(
    manifest,
    facts.baseRootfs !== null,
    { socketPath, loaded: loaded.includes(manifest.base.image) },
    timeoutMs,
  );
  facts.rootfsNode = nodes.rootfs;
  facts.imageNode = nodes.image;
  const missing: string[] = [];
  const disables: string[] = [];
  // Sandboxes run the project's Node (the ama_worker lane's worker, supervisors, ACP agents need >= 24).
  for (const [where, version] of [
    ["rootfs", nodes.rootfs],
    ["image", nodes.image],
  ] as const) {
    if (version !== null && Number(version.replace(/^v/, "").split(".")[0]) < MIN_NODE_MAJOR) {
      missing.push(`the base ${where} runs Node ${version} (need >= ${MIN_NODE_MAJOR})`);
      disables.push(`the in-sandbox lanes on the base ${where} (the official worker needs Node >= ${MIN_NODE_MAJOR})`);
    }
  }
  if (dockerUp && !loaded.includes(manifest.base.image)) {
    missing.push(`${manifest.base.image} not loaded`);
    disables.push("the node-docker driver (its base image is missing)");
  }
  if (facts.baseRootfs === null) {
    missing.push(`rootfs ${manifest.base.rootfs} missing`);
    disables.push("the prebuilt bubblewrap rootfs (node and tools inside the sandbox)");
  }
  const node = [...new Set([nodes.rootfs, nodes.image].filter((v) => v !== null))].join("/") || "unknown";
  const detail = `base ${manifest.base.image}${dockerUp ? (loaded.includes(manifest.base.image) ? " loaded" : " NOT loaded") : ""}, rootfs ${manifest.base.rootfs}, sandbox node ${node}`;
  if (missing.length === 0) return check("images", "ok", detail, { facts });
  return check("images", "missing", `${detail}: ${missing.join("; ")}`, { disables, hint: PROVISION, facts });
}

/**
 * Which cgroups bubblewrap can limit sandboxes with: v2 controllers (a delegated parent), or, as root, the v1
 * memory, pids and cpu hierarchies (one cgroup per sandbox in each, as Docker does on such a host).
 */
export async function checkCgroups(): Promise<DoctorCheck> {
  const read = (path: string) => readFile(path, "utf8").catch(() => null);
  const unifiedRoot = await read("/sys/fs/cgroup/cgroup.controllers");
  const hybrid = unifiedRoot === null ? await read("/sys/fs/cgroup/unified/cgroup.controllers") : null;
  const v1 = ((await read("/proc/cgroups")) ?? "")
    .split("\n")
    .filter((line) => line && !line.startsWith("#"))
    .map((line) => line.split("\t"))
    .filter((cols) => cols[3] === "1" && cols[1] !== "0")
    .map((cols) => cols[0] as string);
  if (unifiedRoot !== null) {
    const controllers = unifiedRoot.trim().split(/\s+/).filter(Boolean);
    const lacking = ["cpu", "memory", "pids"].filter((c) => !controllers.includes(c));
    const facts = { version: "v2", controllers };
    if (lacking.length === 0) return check("cgroups", "ok", `cgroup v2, controllers: ${controllers.join(" ")}`, { facts });
    return check("cgroups", "warn", `cgroup v2 without ${lacking.join(", ")}`, {
      disables: [`bubblewrap ${lacking.join("/")} limits`],
      facts,
    });
  }
  const mode = hybrid !== null ? "v1 (hybrid, no v2 controllers delegated)" : "v1";
  const facts = { version: hybrid !== null ? "hybrid" : "v1", controllers: v1 };
  const detail = `cgroup ${mode}; v1 controllers: ${v1.join(" ") || "none"}`;
  const mounted = CgroupV1.present("/sys/fs/cgroup");
  const lacking = ["cpu", "memory", "pids"].filter((c) => !v1.includes(c) || !mounted);
  // The same judgement the driver makes: as root, this process's own v1 cgroups must be writable.
  const usable = mounted && process.getuid?.() === 0 && CgroupV1.detect("/sys/fs/cgroup") !== null;
  if (lacking.length === 0 && usable) return check("cgroups", "ok", `${detail}; bubblewrap limits each sandbox with them`, { facts });
  return check("cgroups", "warn", detail, {
    disables: [
      lacking.length > 0
        ? `bubblewrap ${lacking.join("/")} limits (no v1 hierarchy mounted for them, no v2 delegation); Docker still enforces its own limits`
        : "bubblewrap cgroup limits (they need root and writable v1 hierarchies); sandboxes get per-process rlimits",
    ],
    facts,
  });
}

export async function runDoctor(options: DoctorOptions = {}): Promise<DoctorReport> {
  const env = options.env ?? process.env;
  const timeoutMs = options.timeoutMs ?? 5_000;
  const socket = options.dockerSocket ?? env.OPENMA_DOCKER_SOCKET ?? "/var/run/docker.sock";
  const manifest = options.imageManifest ?? env.OPENMA_IMAGE_MANIFEST ?? "/var/lib/openma/images.json";
  const [sqlite, postgres, bubblewrap, docker, cgroups] = await Promise.all([
    checkSqlite(),
    checkPostgres(env.DATABASE_URL || undefined, timeoutMs),
    checkBubblewrap(timeoutMs),
    checkDocker(socket, timeoutMs),
    checkCgroups(),
  ]);
  const images = await checkImages(manifest, socket, docker.status === "ok", timeoutMs);
  // Cloud drivers in use (selected, or with credentials present): their variables, and one real call.
  const { checkRemoteSandboxes } = await import("./remote-sandboxes.ts");
  const remote = await checkRemoteSandboxes(env, timeoutMs);
  // Session sandboxes per driver (owned, idle, orphaned) in the database the server would use.
  const { checkSandboxOwnership } = await import("./sandbox-owners.ts");
  const sandboxes = await checkSandboxOwnership(env, timeoutMs);
  const { checkAcpHarnesses } = await import("./acp-harnesses.ts");
  const acp = await checkAcpHarnesses(env);
  return summarize([checkNode(), sqlite, postgres, bubblewrap, docker, images, cgroups, ...remote, sandboxes, acp]);
}

/**
 * The embedded default's verdict: bubblewrap first, then Docker (engine and
 * base image), else it cannot run, because the server fails closed rather
 * than run agent tools unisolated.
 */
export function summarize(checks: DoctorCheck[]): DoctorReport {
  const byId = (id: DoctorCheck["id"]) => checks.find((c) => c.id === id);
  const ok = (id: DoctorCheck["id"]) => byId(id)?.status === "ok";
  const images = byId("images");
  const loaded = Array.isArray(images?.facts.loaded) ? images.facts.loaded : [];
  const dockerUsable = ok("docker") && loaded.includes(String(images?.facts.baseImage));
  const sandbox = ok("bubblewrap") ? "bubblewrap" : dockerUsable ? "docker" : null;
  const basics = ok("node") && ok("sqlite");
  const reason = !basics
    ? `Node.js ${MIN_NODE_MAJOR}+ and SQLite are required`
    : sandbox === null
      ? "no usable sandbox: bubblewrap does not work and Docker (engine + base image) is not available, so the server would fail closed"
      : `SQLite storage and the ${sandbox} sandbox driver`;
  const runnable = basics && sandbox !== null;
  return { ok: runnable, embeddedDefault: { runnable, sandbox, reason }, checks };
}

const MARK: Record<CheckStatus, string> = { ok: "ok  ", missing: "MISS", warn: "warn", skipped: "skip" };

export function formatReport(report: DoctorReport): string {
  const lines = ["openma doctor", ""];
  for (const c of report.checks) {
    lines.push(`  [${MARK[c.status]}] ${c.id.padEnd(11)} ${c.detail}`);
    for (const d of c.disables) lines.push(`  ${" ".repeat(18)}disables: ${d}`);
    if (c.hint && c.status !== "ok") lines.push(`  ${" ".repeat(18)}fix: ${c.hint}`);
  }
  lines.push("");
  lines.push(`embedded default: ${report.embeddedDefault.runnable ? "can run" : "CANNOT run"} (${report.embeddedDefault.reason})`);
  return `${lines.join("\n")}\n`;
}

/** The CLI entry: prints the report and sets the exit code. */
export async function doctorCommand(args: string[]): Promise<void> {
  const unknown = args.filter((a) => a !== "--json");
  if (unknown.length > 0) {
    process.stderr.write(`openma doctor: unknown argument ${unknown[0]}\nusage: openma doctor [--json]\n`);
    process.exitCode = 2;
    return;
  }
  const report = await runDoctor();
  process.stdout.write(args.includes("--json") ? `${JSON.stringify(report, null, 2)}\n` : formatReport(report));
  process.exitCode = report.ok ? 0 : 1;
}
