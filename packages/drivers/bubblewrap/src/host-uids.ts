/**
 * A host uid of its own for every sandbox (when the driver runs as root):
 * budgets the kernel keeps per uid (RLIMIT_NPROC, a uid's files in shared
 * places, signals) are then never shared between sandboxes.
 *
 * A uid is claimed by creating `<stateRoot>/uids/<uid>` exclusively (the
 * file names the runtime), so processes sharing a state root never hand out
 * the same uid twice; the runtime's destruction removes the claim. A claim
 * whose runtime directory is gone (a crash between the two) is skipped by
 * allocation and removed by `clearStaleHostUids`.
 */
import { createHash } from "node:crypto";
import { existsSync } from "node:fs";
import { mkdir, readdir, readFile, unlink, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { isRuntimeId, runtimeDir } from "./state.ts";

export interface HostUidRange {
  first: number;
  count: number;
}

/** Far above login and system users, and below the ranges container engines usually delegate (0x70000000 + 65536). */
export const DEFAULT_HOST_UID_RANGE: HostUidRange = { first: 0x7000_0000, count: 65_536 };

export function hostUidRangeIssues(range: HostUidRange): string[] {
  const ok = Number.isInteger(range.first) && Number.isInteger(range.count) && range.first >= 1000 && range.count >= 1;
  return ok && range.first + range.count <= 2 ** 31 - 1 ? [] : ["hostUidRange: first >= 1000, count >= 1, and the range below 2147483647"];
}

const claimsDir = (stateRoot: string) => join(stateRoot, "uids");

/** Claims a free uid for the runtime (the same one again when it already holds one); null when the range is exhausted. */
export async function claimHostUid(stateRoot: string, runtimeId: string, range: HostUidRange): Promise<number | null> {
  const dir = claimsDir(stateRoot);
  await mkdir(dir, { recursive: true, mode: 0o700 });
  // Start where the runtime id points, so concurrent starts rarely probe the same uids.
  const start = createHash("sha256").update(runtimeId).digest().readUInt32BE(0) % range.count;
  for (let i = 0; i < range.count; i++) {
    const uid = range.first + ((start + i) % range.count);
    try {
      await writeFile(join(dir, String(uid)), runtimeId, { flag: "wx", mode: 0o600 });
      return uid;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== "EEXIST") throw err;
      if ((await readFile(join(dir, String(uid)), "utf8").catch(() => "")) === runtimeId) return uid;
    }
  }
  return null;
}

/** Ends the runtime's claim (only its own: a claim another runtime holds is left alone). */
export async function releaseHostUid(stateRoot: string, uid: number, runtimeId: string): Promise<void> {
  const file = join(claimsDir(stateRoot), String(uid));
  if ((await readFile(file, "utf8").catch(() => null)) === runtimeId) await unlink(file).catch(() => {});
}

/** Removes claims whose runtime directory no longer exists; returns how many. */
export async function clearStaleHostUids(stateRoot: string): Promise<number> {
  const dir = claimsDir(stateRoot);
  let cleared = 0;
  for (const name of await readdir(dir).catch(() => [] as string[])) {
    const owner = await readFile(join(dir, name), "utf8").catch(() => null);
    if (owner === null || (isRuntimeId(owner) && existsSync(runtimeDir(stateRoot, owner)))) continue;
    // Narrow race, stated: two processes clearing at once could remove a claim made between one's check and its unlink;
    // the worst outcome is two sandboxes sharing a uid, as every sandbox did before per-sandbox uids.
    await unlink(join(dir, name)).catch(() => {});
    cleared++;
  }
  return cleared;
}
