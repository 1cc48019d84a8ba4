/**
 * The key that seals vault credential secrets at rest. `OPENMA_SECRET_KEY`
 * configures it (base64 of 32 bytes; a comma-separated list rotates keys:
 * the first seals, the others only open). Otherwise, like the admin key, one
 * is generated on first start into `<data dir>/secret-key` (mode 0600).
 *
 * A generated key file is also kept as an opening key after a key is
 * configured, so rows sealed before are still readable and the start-up
 * re-seal moves them to the configured key. No key ever reaches a log.
 */
import { randomBytes } from "node:crypto";
import { existsSync, linkSync, readFileSync, unlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { decodeSecretKey, generateSecretKey, SecretBox } from "@openma/storage";

export const SECRET_KEY_FILE = "secret-key";

export interface SecretKeys {
  box: SecretBox;
  /** Where the keys came from: configuration, or the data dir's key file. */
  source: "configured" | "data_dir";
  /** The data dir's key file (read when present, even with a configured key). */
  file: string;
  /** Whether this start generated the key file. */
  generated: boolean;
}

/** `configured`: the OPENMA_SECRET_KEY list (current first), already validated by the config. */
export function loadSecretKeys(dataDir: string, configured: readonly string[] | undefined): SecretKeys {
  const file = join(dataDir, SECRET_KEY_FILE);
  if (configured && configured.length > 0) {
    const [current, ...previous] = configured.map(decodeSecretKey) as [Buffer, ...Buffer[]];
    if (existsSync(file)) previous.push(readKeyFile(file));
    return { box: new SecretBox(current, previous), source: "configured", file, generated: false };
  }
  const generated = !existsSync(file) && createKeyFile(file);
  return { box: new SecretBox(readKeyFile(file)), source: "data_dir", file, generated };
}

function readKeyFile(file: string): Buffer {
  try {
    return decodeSecretKey(readFileSync(file, "utf8"));
  } catch (err) {
    // The decoder's message never repeats the content.
    throw new Error(`${file}: ${(err as Error).message}`);
  }
}

/**
 * Writes a fresh key to a private temporary file, then links it into place:
 * the link fails if another process sharing the data dir won the race, and
 * nobody ever reads a half-written key. Returns whether this call created it.
 */
function createKeyFile(file: string): boolean {
  const tmp = `${file}.${process.pid}.${randomBytes(6).toString("hex")}.tmp`;
  writeFileSync(tmp, `${generateSecretKey()}\n`, { mode: 0o600, flag: "wx" });
  try {
    linkSync(tmp, file);
    return true;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== "EEXIST") throw err;
    return false;
  } finally {
    unlinkSync(tmp);
  }
}
