/**
 * `/v1/vaults` and `/v1/vaults/{vault_id}/credentials` (API key only).
 * Credential secrets (tokens, client secrets, secret values) are accepted on
 * create/update, kept in the `secret` column and never returned or logged.
 * The column holds them sealed by `deps.secrets` (AES-256-GCM, bound to the
 * credential id; see @openma/storage vault-secrets); rows written before
 * encryption hold plaintext JSON, which still reads and which the server
 * re-seals at start-up.
 */

import { openVaultSecret, SecretBoxError, sealVaultSecret } from "@openma/storage";
import type { Context } from "hono";
import { Hono } from "hono";
import { requireCredential } from "../auth.ts";
import type { AppEnv } from "../context.ts";
import { ApiError, badRequest, notFound } from "../errors.ts";
import { documentQuery, listDocuments } from "../pagination.ts";
import {
  applyAuthUpdate,
  type CredentialAuth,
  type CredentialSecret,
  credentialCreateSchema,
  credentialUpdateSchema,
  splitAuth,
  vaultCreateSchema,
  vaultUpdateSchema,
} from "../schemas/vault.ts";
import { limitBody, MB } from "../uploads.ts";
import { fromJson, newIdFor, nowIso, pathId } from "../util.ts";
import { applyMetadataPatch, parseJsonBody, parseQuery } from "../validate.ts";

export interface Vault {
  type: "vault";
  id: string;
  display_name: string;
  metadata: Record<string, string>;
  created_at: string;
  updated_at: string;
  archived_at: string | null;
}

export interface VaultCredential {
  type: "vault_credential";
  id: string;
  vault_id: string;
  display_name: string | null;
  metadata: Record<string, string>;
  auth: CredentialAuth;
  created_at: string;
  updated_at: string;
  archived_at: string | null;
}

// Conditional writes compare the whole stored body: a concurrent change makes them miss.
// 409 without x-should-retry:false, so the SDK retries and re-reads.
const concurrentChange = (what: string) => new ApiError(409, "conflict_error", `${what} was modified concurrently; retry`);

export async function loadVault(c: Context<AppEnv>, id: string): Promise<Vault> {
  const row = await c.get("deps").storage.db.selectFrom("vaults").select("body").where("id", "=", id).executeTakeFirst();
  if (!row) throw notFound("vault", id);
  return fromJson<Vault>(row.body);
}

/** `secret` is the stored column text (sealed, or legacy plaintext): conditional writes compare exactly it. */
async function loadCredential(c: Context<AppEnv>, vaultId: string, id: string): Promise<{ credential: VaultCredential; secret: string }> {
  const row = await c
    .get("deps")
    .storage.db.selectFrom("vault_credentials")
    .select(["body", "secret"])
    .where("id", "=", id)
    .where("vault_id", "=", vaultId)
    .executeTakeFirst();
  if (!row) throw notFound("vault credential", id);
  return { credential: fromJson<VaultCredential>(row.body), secret: row.secret };
}

/**
 * Opens a credential's stored secret. A value this server cannot open (a
 * missing or wrong OPENMA_SECRET_KEY, or an altered row) is a server-side
 * fault: a 500 naming the credential and the reason, never the value.
 */
function readSecret(c: Context<AppEnv>, credentialId: string, stored: string): CredentialSecret {
  let json: string;
  try {
    json = openVaultSecret(c.get("deps").secrets, credentialId, stored);
  } catch (err) {
    if (!(err instanceof SecretBoxError)) throw err;
    throw new ApiError(
      500,
      "api_error",
      `the stored secret of vault credential ${credentialId} cannot be decrypted with this server's secret keys (${err.reason})`,
    );
  }
  return fromJson<CredentialSecret>(json);
}

export function vaultRoutes(): Hono<AppEnv> {
  const r = new Hono<AppEnv>();
  r.use("*", async (c, next) => {
    requireCredential(c, "api_key");
    await next();
  });
  r.use("*", limitBody(MB, "request body"));

  r.post("/", async (c) => {
    const input = await parseJsonBody(c, vaultCreateSchema);
    const now = nowIso(c);
    const vault: Vault = {
      type: "vault",
      id: newIdFor(c, "vlt"),
      display_name: input.display_name,
      metadata: input.metadata ?? {},
      created_at: now,
      updated_at: now,
      archived_at: null,
    };
    await c
      .get("deps")
      .storage.db.insertInto("vaults")
      .values({ id: vault.id, body: JSON.stringify(vault), created_at: now, updated_at: now, archived_at: null })
      .execute();
    return c.json(vault);
  });

  r.get("/", async (c) => {
    const q = parseQuery(c, documentQuery);
    return c.json(await listDocuments<Vault>(c.get("deps").storage.db, "vaults", q));
  });

  r.get("/:vault_id", async (c) => c.json(await loadVault(c, pathId(c, "vault_id"))));

  r.post("/:vault_id", async (c) => {
    const id = pathId(c, "vault_id");
    const input = await parseJsonBody(c, vaultUpdateSchema, { allowEmpty: true });
    const current = await loadVault(c, id);
    if (current.archived_at) throw badRequest("vault is archived and cannot be updated");
    const next: Vault = { ...current, metadata: applyMetadataPatch(current.metadata, input.metadata) };
    if (input.display_name) next.display_name = input.display_name;
    if (JSON.stringify(next) === JSON.stringify(current)) return c.json(current);
    next.updated_at = nowIso(c);
    // Conditional on the body we read: a concurrent update is not silently lost.
    const updated = await c
      .get("deps")
      .storage.db.updateTable("vaults")
      .set({ body: JSON.stringify(next), updated_at: next.updated_at })
      .where("id", "=", id)
      .where("body", "=", JSON.stringify(current))
      .executeTakeFirst();
    if (Number(updated.numUpdatedRows) !== 1) throw concurrentChange("vault");
    return c.json(next);
  });

  r.delete("/:vault_id", async (c) => {
    const id = pathId(c, "vault_id");
    const { db } = c.get("deps").storage;
    await db.transaction().execute(async (trx) => {
      const deleted = await trx.deleteFrom("vaults").where("id", "=", id).executeTakeFirst();
      if (Number(deleted.numDeletedRows) !== 1) throw notFound("vault", id);
      await trx.deleteFrom("vault_credentials").where("vault_id", "=", id).execute();
    });
    return c.json({ id, type: "vault_deleted" as const });
  });

  r.post("/:vault_id/archive", async (c) => {
    const id = pathId(c, "vault_id");
    const current = await loadVault(c, id);
    if (current.archived_at) return c.json(current);
    const now = nowIso(c);
    const archived: Vault = { ...current, archived_at: now, updated_at: now };
    const { db } = c.get("deps").storage;
    const won = await db.transaction().execute(async (trx) => {
      const res = await trx
        .updateTable("vaults")
        .set({ body: JSON.stringify(archived), archived_at: now, updated_at: now })
        .where("id", "=", id)
        .where("archived_at", "is", null)
        .executeTakeFirst();
      if (Number(res.numUpdatedRows) !== 1) return false;
      // An archived vault's secrets must not be used any more: archive its credentials with it.
      const live = await trx
        .selectFrom("vault_credentials")
        .select(["id", "body"])
        .where("vault_id", "=", id)
        .where("archived_at", "is", null)
        .execute();
      for (const row of live) {
        const body = JSON.stringify({ ...fromJson<VaultCredential>(row.body), archived_at: now, updated_at: now });
        await trx.updateTable("vault_credentials").set({ body, archived_at: now, updated_at: now }).where("id", "=", row.id).execute();
      }
      return true;
    });
    return c.json(won ? archived : await loadVault(c, id));
  });

  credentialRoutes(r);
  return r;
}

function credentialRoutes(r: Hono<AppEnv>): void {
  r.post("/:vault_id/credentials", async (c) => {
    const vaultId = pathId(c, "vault_id");
    const input = await parseJsonBody(c, credentialCreateSchema);
    const vault = await loadVault(c, vaultId);
    if (vault.archived_at) throw badRequest("vault is archived; credentials cannot be added");
    const deps = c.get("deps");
    const { auth, secret } = splitAuth(input.auth, deps.clock.now());
    const now = nowIso(c);
    const credential: VaultCredential = {
      type: "vault_credential",
      id: newIdFor(c, "vcrd"),
      vault_id: vaultId,
      display_name: input.display_name ?? null,
      metadata: input.metadata ?? {},
      auth,
      created_at: now,
      updated_at: now,
      archived_at: null,
    };
    await deps.storage.db
      .insertInto("vault_credentials")
      .values({
        id: credential.id,
        vault_id: vaultId,
        body: JSON.stringify(credential),
        secret: sealVaultSecret(deps.secrets, credential.id, JSON.stringify(secret)),
        created_at: now,
        updated_at: now,
        archived_at: null,
      })
      .execute();
    return c.json(credential);
  });

  r.get("/:vault_id/credentials", async (c) => {
    const vaultId = pathId(c, "vault_id");
    const q = parseQuery(c, documentQuery);
    await loadVault(c, vaultId);
    return c.json(await listDocuments<VaultCredential>(c.get("deps").storage.db, "vault_credentials", { ...q, vaultId }));
  });

  r.get("/:vault_id/credentials/:credential_id", async (c) => {
    const { credential } = await loadCredential(c, pathId(c, "vault_id"), pathId(c, "credential_id"));
    return c.json(credential);
  });

  r.post("/:vault_id/credentials/:credential_id", async (c) => {
    const vaultId = pathId(c, "vault_id");
    const id = pathId(c, "credential_id");
    const input = await parseJsonBody(c, credentialUpdateSchema, { allowEmpty: true });
    const { credential: current, secret: stored } = await loadCredential(c, vaultId, id);
    if (current.archived_at) throw badRequest("vault credential is archived and cannot be updated");
    const deps = c.get("deps");
    const next: VaultCredential = { ...current, metadata: applyMetadataPatch(current.metadata, input.metadata) };
    if (input.display_name !== undefined) next.display_name = input.display_name;
    // The stored text is kept unless the secret itself changes: a fresh nonce would make every seal differ.
    let secretText = stored;
    if (input.auth) {
      const currentSecret = readSecret(c, id, stored);
      const applied = applyAuthUpdate(current.auth, currentSecret, input.auth, deps.clock.now());
      next.auth = applied.auth;
      const nextJson = JSON.stringify(applied.secret);
      if (nextJson !== JSON.stringify(currentSecret)) secretText = sealVaultSecret(deps.secrets, id, nextJson);
    }
    if (JSON.stringify(next) === JSON.stringify(current) && secretText === stored) return c.json(current);
    next.updated_at = nowIso(c);
    // Conditional on the exact stored text read (ciphertext or legacy plaintext), never on a re-sealed one.
    const updated = await deps.storage.db
      .updateTable("vault_credentials")
      .set({ body: JSON.stringify(next), secret: secretText, updated_at: next.updated_at })
      .where("id", "=", id)
      .where("body", "=", JSON.stringify(current))
      .where("secret", "=", stored)
      .executeTakeFirst();
    if (Number(updated.numUpdatedRows) !== 1) throw concurrentChange("vault credential");
    return c.json(next);
  });

  r.delete("/:vault_id/credentials/:credential_id", async (c) => {
    const vaultId = pathId(c, "vault_id");
    const id = pathId(c, "credential_id");
    const deleted = await c
      .get("deps")
      .storage.db.deleteFrom("vault_credentials")
      .where("id", "=", id)
      .where("vault_id", "=", vaultId)
      .executeTakeFirst();
    if (Number(deleted.numDeletedRows) !== 1) throw notFound("vault credential", id);
    return c.json({ id, type: "vault_credential_deleted" as const });
  });

  r.post("/:vault_id/credentials/:credential_id/archive", async (c) => {
    const vaultId = pathId(c, "vault_id");
    const id = pathId(c, "credential_id");
    const { credential } = await loadCredential(c, vaultId, id);
    if (credential.archived_at) return c.json(credential);
    const now = nowIso(c);
    const archived: VaultCredential = { ...credential, archived_at: now, updated_at: now };
    const res = await c
      .get("deps")
      .storage.db.updateTable("vault_credentials")
      .set({ body: JSON.stringify(archived), archived_at: now, updated_at: now })
      .where("id", "=", id)
      .where("archived_at", "is", null)
      .executeTakeFirst();
    if (Number(res.numUpdatedRows) !== 1) return c.json((await loadCredential(c, vaultId, id)).credential);
    return c.json(archived);
  });

  r.post("/:vault_id/credentials/:credential_id/mcp_oauth_validate", async (c) => {
    const vaultId = pathId(c, "vault_id");
    const id = pathId(c, "credential_id");
    const { credential, secret } = await loadCredential(c, vaultId, id);
    if (credential.auth.type !== "mcp_oauth")
      throw badRequest(`credential is ${credential.auth.type}; only mcp_oauth credentials can be validated`);
    const stored = readSecret(c, id, secret);
    // This server makes no outbound calls to MCP servers or token endpoints, so it cannot tell.
    return c.json({
      type: "vault_credential_validation" as const,
      credential_id: id,
      vault_id: vaultId,
      status: "unknown" as const,
      has_refresh_token: !!stored.refresh_token,
      validated_at: nowIso(c),
      refresh: null,
      mcp_probe: null,
      status_reason: "this server does not probe MCP servers or token endpoints, so the credential could not be tested",
    });
  });
}
