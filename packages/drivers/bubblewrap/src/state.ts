/**
 * The on-disk record of a runtime, `<stateRoot>/<runtimeId>/state.json`:
 * enough for any process sharing the state root (a restarted host, the
 * orphan reaper) to find, verify and kill the sandbox. It holds pids with
 * their start times and host paths; never a credential.
 */
import { createHash } from "node:crypto";
import { chmod, mkdir, readFile, rename, rm, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { canonicalJson, type RuntimeResourceScope, runtimeScopeKey } from "@openma/contract";

export const PROVIDER = "bubblewrap";
const RUNTIME_ID = /^bwrap-[0-9a-f]{32}$/;

export interface RuntimeState {
  version: 1;
  runtimeId: string;
  /** The sandbox's pid 1 (bwrap's reaper inside the namespaces), as the host sees it. */
  initPid: number;
  initStart: number;
  /** The outer bwrap process (the host-side parent of the init). */
  outerPid: number;
  outerStart: number;
  workspace: string;
  outputs: string | null;
  /** The runtime's cgroups (one v2 cgroup, one per v1 hierarchy, or none). */
  cgroupDirs: string[];
  /** The host identity its processes run as (null: the driver's own); absent in records of older drivers. */
  hostUser: { uid: number; gid: number } | null;
  createdAt: number;
  /** Who acquired it (absent in records written before ownership was recorded): what `listOwned` reports. */
  owner?: RuntimeOwner;
  /**
   * Variables the credential-egress gateway gave the sandbox (placeholders under the credentials' names, never a
   * secret), so a process that did not start the runtime runs commands with the same environment.
   */
  egressEnv?: Record<string, string>;
}

/** Ownership marks, as the other drivers write them as labels: ids and labels, never a credential. */
export interface RuntimeOwner {
  environmentId: string;
  sessionId: string;
  ownerId: string;
  generation: number;
  labels: Record<string, string>;
}

/** Deterministic per (scope, idempotency key): a retried acquire finds the runtime the first attempt started. */
export function runtimeIdFor(scope: RuntimeResourceScope, idempotencyKey: string): string {
  const digest = createHash("sha256")
    .update(canonicalJson([runtimeScopeKey(scope), idempotencyKey]))
    .digest("hex");
  return `bwrap-${digest.slice(0, 32)}`;
}

/** Only ids this driver mints are ever turned into paths, so a forged lease cannot point outside the state root. */
export function isRuntimeId(value: unknown): value is string {
  return typeof value === "string" && RUNTIME_ID.test(value);
}

export function runtimeDir(stateRoot: string, runtimeId: string): string {
  return join(stateRoot, runtimeId);
}

/** The process that made a runtime directory: it is still starting the runtime while it lives and no state exists. */
export interface RuntimeCreator {
  pid: number;
  start: number;
}

const CREATOR_FILE = "creator.json";
/** A runtime directory being made: named so only the reaper's creator check ever looks at it. */
const MAKING = /^(bwrap-[0-9a-f]{32})\.making-\d+$/;

/**
 * Makes the runtime directory (with `tmp/` inside) so that it never exists
 * without its creator: both are written under a temporary name first and the
 * directory is renamed into place, so another process's reaper (which removes
 * a stateless directory whose creator is gone) can never see it creatorless
 * and remove it from under a start still in progress.
 */
export async function makeRuntimeDir(dir: string, creator: RuntimeCreator): Promise<void> {
  const making = `${dir}.making-${process.pid}`;
  await rm(making, { recursive: true, force: true });
  await mkdir(join(making, "tmp"), { recursive: true, mode: 0o700 });
  await chmod(making, 0o711);
  await writeFile(join(making, CREATOR_FILE), JSON.stringify(creator), { mode: 0o600 });
  await rm(dir, { recursive: true, force: true });
  await rename(making, dir);
}

export async function readCreator(dir: string): Promise<RuntimeCreator | null> {
  try {
    const value = JSON.parse(await readFile(join(dir, CREATOR_FILE), "utf8")) as Partial<RuntimeCreator>;
    return isPid(value.pid) && typeof value.start === "number" ? { pid: value.pid, start: value.start } : null;
  } catch {
    return null;
  }
}

/** The runtime id a directory of a start in progress (or one its creator abandoned) belongs to, or null. */
export function makingRuntimeId(name: string): string | null {
  return MAKING.exec(name)?.[1] ?? null;
}

export async function writeState(dir: string, state: RuntimeState): Promise<void> {
  const temp = join(dir, `.state.${process.pid}.tmp`);
  await writeFile(temp, JSON.stringify(state), { mode: 0o600 });
  await rename(temp, join(dir, "state.json"));
}

export async function readState(dir: string): Promise<RuntimeState | null> {
  let value: unknown;
  try {
    value = JSON.parse(await readFile(join(dir, "state.json"), "utf8"));
  } catch {
    return null;
  }
  return isRuntimeState(value) ? value : legacyState(value);
}

/** A record of an older driver: one optional v2 cgroup, and every sandbox as host uid 65534 (as root). */
function legacyState(value: unknown): RuntimeState | null {
  if (typeof value !== "object" || value === null) return null;
  const { cgroupDir, ...rest } = value as { cgroupDir?: unknown };
  if (!(cgroupDir === null || typeof cgroupDir === "string")) return null;
  const state = {
    ...rest,
    cgroupDirs: cgroupDir === null ? [] : [cgroupDir],
    hostUser: process.getuid?.() === 0 ? LEGACY_HOST_USER : null,
  };
  return isRuntimeState(state) ? state : null;
}

const LEGACY_HOST_USER = { uid: 65534, gid: 65534 };

function isIds(value: unknown): value is { uid: number; gid: number } {
  const ids = value as { uid?: unknown; gid?: unknown } | null;
  return typeof ids === "object" && ids !== null && [ids.uid, ids.gid].every((id) => Number.isInteger(id) && (id as number) >= 0);
}

function isPid(value: unknown): value is number {
  return typeof value === "number" && Number.isInteger(value) && value > 0;
}

function isRuntimeState(value: unknown): value is RuntimeState {
  if (typeof value !== "object" || value === null) return false;
  const state = value as Partial<RuntimeState>;
  return (
    state.version === 1 &&
    isRuntimeId(state.runtimeId) &&
    isPid(state.initPid) &&
    isPid(state.outerPid) &&
    Number.isInteger(state.initStart) &&
    Number.isInteger(state.outerStart) &&
    typeof state.workspace === "string" &&
    (state.outputs === null || typeof state.outputs === "string") &&
    Array.isArray(state.cgroupDirs) &&
    state.cgroupDirs.every((dir) => typeof dir === "string" && dir.startsWith("/")) &&
    (state.hostUser === null || isIds(state.hostUser)) &&
    (state.owner === undefined || isOwner(state.owner))
  );
}

function isOwner(value: unknown): value is RuntimeOwner {
  if (typeof value !== "object" || value === null) return false;
  const owner = value as Partial<RuntimeOwner>;
  return (
    [owner.environmentId, owner.sessionId, owner.ownerId].every((id) => typeof id === "string" && id.length > 0) &&
    Number.isSafeInteger(owner.generation) &&
    typeof owner.labels === "object" &&
    owner.labels !== null &&
    Object.values(owner.labels).every((v) => typeof v === "string")
  );
}
