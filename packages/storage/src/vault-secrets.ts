/**
 * How `vault_credentials.secret` is stored: the credential's secret JSON,
 * sealed by a SecretBox with the credential id as associated data (a value
 * copied to another row does not open). Rows written before encryption hold
 * the JSON itself; they still read, and `resealVaultCredentialSecrets` (run
 * by the server at start-up) seals them, and re-seals rows sealed with a
 * retired key, with the current key.
 *
 * The composition root hands the same box to the API (`ApiDeps.secrets`)
 * and to the harness (`TurnRunnerDeps.secrets`, reaching server tools as
 * `ServerToolContext.secrets`). Without a box, values are written as
 * plaintext JSON (the pre-encryption behaviour, for compositions that
 * configure no key) and sealed values cannot be read.
 */

import { isSealed, type SecretBox, SecretBoxError } from "./secret-box.ts";
import type { Storage } from "./storage.ts";

/** The associated data binding a sealed secret to its credential row. */
export function vaultSecretAad(credentialId: string): string {
  return `vault_credentials.secret:${credentialId}`;
}

/** The column text for a credential's secret JSON: sealed when a box is configured. */
export function sealVaultSecret(box: SecretBox | undefined, credentialId: string, json: string): string {
  return box ? box.seal(json, vaultSecretAad(credentialId)) : json;
}

/**
 * The secret JSON of a stored column value: opened when sealed, as-is when
 * legacy plaintext. Throws SecretBoxError when it cannot be opened.
 */
export function openVaultSecret(box: SecretBox | undefined, credentialId: string, stored: string): string {
  if (!isSealed(stored)) return stored;
  if (!box) throw new SecretBoxError("unknown_key", "sealed secret found but no secret key is configured");
  return box.open(stored, vaultSecretAad(credentialId));
}

export interface ResealReport {
  /** Rows that were plaintext or sealed with another configured key, now sealed with the current key. */
  resealed: number;
  /** Ids of rows that could not be opened (unknown key, tampered): left as they are. */
  unreadable: string[];
}

const RESEAL_BATCH = 200;

/**
 * Seals every plaintext secret, and re-seals every secret sealed with a key
 * other than the current one. Idempotent, and safe with several servers
 * starting at once: each write is conditional on the exact text read, so a
 * concurrent change (already sealed by its writer) is never overwritten.
 * Archived credentials are included: their secrets are still secrets.
 */
export async function resealVaultCredentialSecrets(storage: Storage, box: SecretBox): Promise<ResealReport> {
  const report: ResealReport = { resealed: 0, unreadable: [] };
  // The prefix holds no LIKE wildcards (hex key id); the JS check below covers SQLite's case-insensitive LIKE.
  const current = `${box.currentPrefix}%`;
  let after = "";
  for (;;) {
    const rows = await storage.db
      .selectFrom("vault_credentials")
      .select(["id", "secret"])
      .where("id", ">", after)
      .where("secret", "not like", current)
      .orderBy("id")
      .limit(RESEAL_BATCH)
      .execute();
    for (const row of rows) {
      if (box.sealedWithCurrentKey(row.secret)) continue;
      let json: string;
      try {
        json = openVaultSecret(box, row.id, row.secret);
      } catch (err) {
        if (!(err instanceof SecretBoxError)) throw err;
        report.unreadable.push(row.id);
        continue;
      }
      const res = await storage.db
        .updateTable("vault_credentials")
        .set({ secret: sealVaultSecret(box, row.id, json) })
        .where("id", "=", row.id)
        .where("secret", "=", row.secret)
        .executeTakeFirst();
      report.resealed += Number(res.numUpdatedRows);
    }
    if (rows.length < RESEAL_BATCH) return report;
    after = rows[rows.length - 1]!.id;
  }
}
