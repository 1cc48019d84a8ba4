/**
 * The admin API key. `OPENMA_API_KEY` configures one explicitly; otherwise a
 * key is generated on first start, stored (0600) in the data dir and printed
 * once. Only its SHA-256 ever reaches the database.
 */
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { API_KEY_PREFIX } from "@openma/api";
import { hashSecret, newId, newSecret, type Storage, toIso } from "@openma/storage";

export interface AdminKey {
  /** Set only when a key was generated just now: the caller prints it once. */
  generated: string | undefined;
  configuredHashes: Set<string>;
}

export async function ensureAdminKey(storage: Storage, dataDir: string, configured: string | undefined): Promise<AdminKey> {
  if (configured) return { generated: undefined, configuredHashes: new Set([hashSecret(configured)]) };
  const file = join(dataDir, "admin-api-key");
  if (existsSync(file)) {
    const key = readFileSync(file, "utf8").trim();
    await registerKey(storage, key);
    return { generated: undefined, configuredHashes: new Set() };
  }
  const key = newSecret(API_KEY_PREFIX);
  await registerKey(storage, key);
  writeFileSync(file, `${key}\n`, { mode: 0o600, flag: "wx" });
  return { generated: key, configuredHashes: new Set() };
}

async function registerKey(storage: Storage, key: string): Promise<void> {
  const keyHash = hashSecret(key);
  const existing = await storage.db.selectFrom("api_keys").select("id").where("key_hash", "=", keyHash).executeTakeFirst();
  if (existing) return;
  await storage.db
    .insertInto("api_keys")
    .values({ id: newId("apikey"), key_hash: keyHash, name: "admin (data dir)", created_at: toIso(Date.now()), revoked_at: null })
    .execute();
}
