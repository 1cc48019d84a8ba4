/**
 * Three credential kinds, all sent as `Authorization: Bearer …` by SDK 1.10.0
 * (older clients send `x-api-key`), told apart by value:
 *   API key         `sk-ant-api…`    admin; everything
 *   environment key `sk-ant-oat01-…` one environment's worker fleet
 *   sessions token  `sk-ant-req-…`   one work item's session, rotated on reclaim
 * Each route names the kinds it accepts (see the reference's accept-matrix).
 */

import { hashSecret } from "@openma/storage";
import type { Context, MiddlewareHandler } from "hono";
import type { AppEnv } from "./context.ts";
import { forbidden, unauthenticated } from "./errors.ts";

export const API_KEY_PREFIX = "sk-ant-api03-";
export const ENVIRONMENT_KEY_PREFIX = "sk-ant-oat01-";
export const SESSIONS_TOKEN_PREFIX = "sk-ant-req-";

export type Credential =
  | { kind: "api_key"; keyId: string }
  | { kind: "environment_key"; environmentId: string }
  | { kind: "sessions_token"; workId: string; sessionId: string; environmentId: string; workStopped: boolean };

export type CredentialKind = Credential["kind"];

function presented(c: Context): string | undefined {
  const auth = c.req.header("authorization");
  if (auth) {
    const match = /^Bearer\s+(\S+)\s*$/i.exec(auth);
    return match?.[1] ?? "";
  }
  return c.req.header("x-api-key")?.trim();
}

async function lookup(c: Context<AppEnv>, secret: string): Promise<Credential | null> {
  const { storage, configuredApiKeyHashes } = c.get("deps");
  const hash = hashSecret(secret);
  if (secret.startsWith(SESSIONS_TOKEN_PREFIX)) {
    const work = await storage.db
      .selectFrom("work_items")
      .select(["id", "session_id", "environment_id", "state"])
      .where("token_hash", "=", hash)
      .executeTakeFirst();
    if (!work?.session_id) return null;
    return {
      kind: "sessions_token",
      workId: work.id,
      sessionId: work.session_id,
      environmentId: work.environment_id,
      workStopped: work.state === "stopped",
    };
  }
  if (secret.startsWith(ENVIRONMENT_KEY_PREFIX)) {
    const key = await storage.db
      .selectFrom("environment_keys")
      .select(["environment_id"])
      .where("key_hash", "=", hash)
      .where("revoked_at", "is", null)
      .executeTakeFirst();
    return key ? { kind: "environment_key", environmentId: key.environment_id } : null;
  }
  if (configuredApiKeyHashes.has(hash)) return { kind: "api_key", keyId: "configured" };
  const key = await storage.db
    .selectFrom("api_keys")
    .select(["id"])
    .where("key_hash", "=", hash)
    .where("revoked_at", "is", null)
    .executeTakeFirst();
  return key ? { kind: "api_key", keyId: key.id } : null;
}

/** Resolves the caller's credential once per request; 401 when absent or unknown. */
export const authenticate: MiddlewareHandler<AppEnv> = async (c, next) => {
  const secret = presented(c);
  if (!secret) throw unauthenticated("missing credential: send Authorization: Bearer <key> or x-api-key");
  const credential = await lookup(c, secret);
  if (!credential) throw unauthenticated("invalid credential");
  c.set("credential", credential);
  await next();
};

const KIND_NAMES: Record<CredentialKind, string> = {
  api_key: "an API key",
  environment_key: "an environment key",
  sessions_token: "a sessions token",
};

/**
 * Returns the credential if its kind is accepted here, else 403. A sessions
 * token dies with its work item: once the item is stopped it is refused
 * everywhere except `work/stop` (which answers 409 "already stopped").
 */
export function requireCredential<K extends CredentialKind>(c: Context<AppEnv>, ...kinds: K[]): Extract<Credential, { kind: K }> {
  return requireCredentialOf(c, kinds, false);
}

export function requireCredentialOf<K extends CredentialKind>(
  c: Context<AppEnv>,
  kinds: K[],
  allowStoppedWork: boolean,
): Extract<Credential, { kind: K }> {
  const credential = c.get("credential");
  if (!credential) throw unauthenticated("missing credential");
  if (credential.kind === "sessions_token" && credential.workStopped && !allowStoppedWork) {
    throw unauthenticated("this sessions token expired: its work item is stopped");
  }
  if (!(kinds as CredentialKind[]).includes(credential.kind)) {
    throw forbidden(`this endpoint does not accept ${KIND_NAMES[credential.kind]}`);
  }
  return credential as Extract<Credential, { kind: K }>;
}

/** Middleware form of requireCredential for whole routers. */
export const allow =
  (...kinds: CredentialKind[]): MiddlewareHandler<AppEnv> =>
  async (c, next) => {
    requireCredential(c, ...kinds);
    await next();
  };

/** Scope checks: a sessions token reaches only its own session, an environment key only its environment. */
export function assertSessionScope(credential: Credential, sessionId: string, environmentId: string): void {
  if (credential.kind === "sessions_token" && credential.sessionId !== sessionId) {
    throw forbidden("this sessions token is not valid for this session");
  }
  if (credential.kind === "environment_key" && credential.environmentId !== environmentId) {
    throw forbidden("this environment key is not valid for this session's environment");
  }
}
