/**
 * Vault credentials as server-side tools use them: loaded from the session's
 * `vault_ids`, matched to an MCP server URL (bearer) or to a request host
 * (environment_variable placeholders), refreshed when an OAuth access token
 * has expired, and redacted from every string a tool hands back.
 *
 * Secret values live only in memory here and, sealed, in
 * `vault_credentials.secret` (opened with the SecretBox bound to the Storage,
 * see @openma/storage vault-secrets). A secret that cannot be opened (wrong or
 * missing key, altered row) makes only its credential unusable: using it
 * fails with a clear error, the session goes on.
 * Nothing in this module logs, and every error message is built from ids,
 * URLs and status codes, never from a secret or a third party's response text.
 */
import { openVaultSecret, type SecretBox, SecretBoxError, type Storage, sealVaultSecret } from "@openma/storage";
import { z } from "zod";
import { SecretRedactor } from "../redaction.ts";
import { environmentAllowedHosts, hostMatchesAnyPattern, patternCoveredBy } from "./host-policy.ts";

export { SecretRedactor };

const networkingSchema = z.discriminatedUnion("type", [
  z.object({ type: z.literal("unrestricted") }),
  z.object({ type: z.literal("limited"), allowed_hosts: z.array(z.string()) }),
]);

const authSchema = z.discriminatedUnion("type", [
  z.object({ type: z.literal("static_bearer"), mcp_server_url: z.string() }),
  z.object({
    type: z.literal("mcp_oauth"),
    mcp_server_url: z.string(),
    expires_at: z.string().nullish(),
    refresh: z
      .object({
        client_id: z.string(),
        token_endpoint: z.string(),
        token_endpoint_auth: z.object({ type: z.enum(["none", "client_secret_basic", "client_secret_post"]) }),
        resource: z.string().nullish(),
        scope: z.string().nullish(),
      })
      .nullish(),
  }),
  z.object({
    type: z.literal("environment_variable"),
    secret_name: z.string(),
    injection_location: z.object({ header: z.boolean(), body: z.boolean() }),
    networking: networkingSchema,
  }),
]);

const bodySchema = z.object({ auth: authSchema }).loose();
const secretSchema = z
  .object({
    token: z.string().optional(),
    access_token: z.string().optional(),
    refresh_token: z.string().optional(),
    client_secret: z.string().optional(),
    secret_value: z.string().optional(),
  })
  .loose();

export type StoredAuth = z.infer<typeof authSchema>;
export type StoredSecret = z.infer<typeof secretSchema>;

export interface StoredCredential {
  id: string;
  vaultId: string;
  auth: StoredAuth;
  secret: StoredSecret;
  /** Set when the stored secret cannot be opened: why (no secret in it). The credential then supplies nothing. */
  unreadable: string | null;
  /** The stored column text, compared on write so a concurrent change is never overwritten. */
  rawSecret: string;
  rawBody: string;
}

/** A credential could not supply a usable token (missing, expired without refresh, refresh refused). */
export class CredentialAuthError extends Error {
  constructor(
    message: string,
    readonly credentialId: string,
    readonly vaultId: string,
  ) {
    super(message);
    this.name = "CredentialAuthError";
  }
}

/**
 * The credential's stored secret cannot be decrypted. `code` is what a
 * network-style error report shows (web_fetch prints codes, not messages).
 */
export class CredentialUnreadableError extends CredentialAuthError {
  readonly code = "VAULT_CREDENTIAL_UNREADABLE";
  constructor(credential: StoredCredential) {
    super(credential.unreadable ?? `vault credential ${credential.id} is unreadable`, credential.id, credential.vaultId);
    this.name = "CredentialUnreadableError";
  }
}

/** Compares MCP server URLs by their normalised form (case of scheme/host, default port, trailing slash). */
export function sameServerUrl(a: string, b: string): boolean {
  const norm = (u: string): string | null => {
    try {
      const url = new URL(u);
      url.hash = "";
      const path = url.pathname.replace(/\/+$/, "");
      return `${url.protocol}//${url.host}${path}${url.search}`;
    } catch {
      return null;
    }
  };
  const na = norm(a);
  return na !== null && na === norm(b);
}

const PLAUSIBLE_ID = /^[A-Za-z0-9_-]{1,256}$/;
const ENV_NAME = /^[A-Za-z_][A-Za-z0-9_]{0,255}$/;
const MAX_VAULTS = 64;
const EXPIRY_SKEW_MS = 60_000;
const REFRESH_TIMEOUT_MS = 15_000;
const MAX_TOKEN_RESPONSE_CHARS = 64 * 1024;

const tokenResponseSchema = z.object({
  access_token: z.string().min(1).max(16_384),
  expires_in: z
    .number()
    .positive()
    .max(10 * 365 * 24 * 3600)
    .optional(),
  refresh_token: z.string().min(1).max(16_384).optional(),
});

export interface CredentialOptions {
  now?: () => number;
  fetch?: typeof fetch;
  /** Opens and seals secrets (the server's vault key); absent: secrets are legacy plaintext only. */
  secrets?: SecretBox | undefined;
}

export interface HeaderSubstitution {
  name: string;
  value: string;
}

export interface UnreachableCredential {
  credentialId: string;
  vaultId: string;
  hosts: string[];
}

function parseRow(
  row: { id: string; vault_id: string; body: string; secret: string },
  box: SecretBox | undefined,
): StoredCredential | null {
  const base = { id: row.id, vaultId: row.vault_id, rawSecret: row.secret, rawBody: row.body };
  try {
    const body = bodySchema.safeParse(JSON.parse(row.body));
    if (!body.success) return null;
    let json: string;
    try {
      json = openVaultSecret(box, row.id, row.secret);
    } catch (err) {
      if (!(err instanceof SecretBoxError)) throw err;
      const unreadable = `the stored secret of vault credential ${row.id} cannot be decrypted with this server's secret keys (${err.reason}); restore the key that sealed it or recreate the credential`;
      return { ...base, auth: body.data.auth, secret: {}, unreadable };
    }
    const secret = secretSchema.safeParse(JSON.parse(json));
    if (!secret.success) return null;
    return { ...base, auth: body.data.auth, secret: secret.data, unreadable: null };
  } catch {
    return null;
  }
}

export class SessionCredentials {
  readonly redactor = new SecretRedactor();
  private readonly now: () => number;
  private readonly fetchImpl: typeof fetch;
  private readonly box: SecretBox | undefined;

  private constructor(
    private readonly storage: Storage,
    readonly credentials: StoredCredential[],
    options: CredentialOptions,
  ) {
    this.now = options.now ?? Date.now;
    this.fetchImpl = options.fetch ?? fetch;
    this.box = options.secrets;
    for (const c of credentials) for (const value of Object.values(c.secret)) if (typeof value === "string") this.redactor.add(value);
  }

  /**
   * Active credentials of the session's vaults, in `vault_ids` order and then
   * creation order (ids are time-ordered): the first match wins. Archived
   * vaults and credentials are skipped; rows that do not parse are ignored;
   * rows whose secret cannot be opened are kept, marked `unreadable`, so
   * using them names the problem instead of silently using another credential.
   */
  static async load(storage: Storage, vaultIds: readonly string[], options: CredentialOptions = {}): Promise<SessionCredentials> {
    const ids = [...new Set(vaultIds.filter((id) => PLAUSIBLE_ID.test(id)))].slice(0, MAX_VAULTS);
    if (ids.length === 0) return new SessionCredentials(storage, [], options);
    const rows = await storage.db
      .selectFrom("vault_credentials")
      .innerJoin("vaults", "vaults.id", "vault_credentials.vault_id")
      .select(["vault_credentials.id", "vault_credentials.vault_id", "vault_credentials.body", "vault_credentials.secret"])
      .where("vault_credentials.vault_id", "in", ids)
      .where("vault_credentials.archived_at", "is", null)
      .where("vaults.archived_at", "is", null)
      .orderBy("vault_credentials.id")
      .execute();
    const order = new Map(ids.map((id, i) => [id, i]));
    const box = options.secrets;
    const parsed = rows.map((row) => parseRow(row, box)).filter((c): c is StoredCredential => c !== null);
    parsed.sort((a, b) => (order.get(a.vaultId) ?? 0) - (order.get(b.vaultId) ?? 0));
    return new SessionCredentials(storage, parsed, options);
  }

  /** The first static_bearer / mcp_oauth credential whose `mcp_server_url` is `serverUrl`. */
  mcpCredentialFor(serverUrl: string): StoredCredential | undefined {
    return this.credentials.find(
      (c) => (c.auth.type === "static_bearer" || c.auth.type === "mcp_oauth") && sameServerUrl(c.auth.mcp_server_url, serverUrl),
    );
  }

  /**
   * The bearer token for an MCP credential. An mcp_oauth access token that
   * has expired (or that the server refused, `forceRefresh`) is refreshed
   * with the stored refresh configuration and the result persisted.
   */
  async bearerToken(credential: StoredCredential, opts: { forceRefresh?: boolean; signal?: AbortSignal } = {}): Promise<string> {
    const fail = (message: string) => new CredentialAuthError(message, credential.id, credential.vaultId);
    const { auth, secret } = credential;
    if (credential.unreadable) throw new CredentialUnreadableError(credential);
    if (auth.type === "static_bearer") {
      if (!secret.token) throw fail(`vault credential ${credential.id} has no token`);
      if (opts.forceRefresh) throw fail(`the server rejected the static bearer token of vault credential ${credential.id}`);
      return secret.token;
    }
    if (auth.type !== "mcp_oauth") throw fail(`vault credential ${credential.id} is not an MCP credential`);
    const expiresAt = auth.expires_at ? Date.parse(auth.expires_at) : Number.NaN;
    const expired = Number.isFinite(expiresAt) && this.now() >= expiresAt - EXPIRY_SKEW_MS;
    if (!expired && !opts.forceRefresh && secret.access_token) return secret.access_token;
    if (!auth.refresh || !secret.refresh_token) {
      const why = expired ? "has expired" : opts.forceRefresh ? "was rejected" : "is missing";
      throw fail(`the access token of vault credential ${credential.id} ${why} and it has no refresh configuration`);
    }
    return this.refresh(credential, auth.refresh, opts.signal);
  }

  private async refresh(
    credential: StoredCredential,
    refresh: NonNullable<Extract<StoredAuth, { type: "mcp_oauth" }>["refresh"]>,
    signal: AbortSignal | undefined,
  ): Promise<string> {
    const fail = (message: string) => new CredentialAuthError(message, credential.id, credential.vaultId);
    const params = new URLSearchParams({ grant_type: "refresh_token", refresh_token: credential.secret.refresh_token ?? "" });
    const headers: Record<string, string> = { "content-type": "application/x-www-form-urlencoded", accept: "application/json" };
    const method = refresh.token_endpoint_auth.type;
    if (method === "client_secret_basic") {
      const pair = `${encodeURIComponent(refresh.client_id)}:${encodeURIComponent(credential.secret.client_secret ?? "")}`;
      headers.authorization = `Basic ${Buffer.from(pair).toString("base64")}`;
    } else {
      params.set("client_id", refresh.client_id);
      if (method === "client_secret_post") params.set("client_secret", credential.secret.client_secret ?? "");
    }
    if (refresh.resource) params.set("resource", refresh.resource);
    if (refresh.scope) params.set("scope", refresh.scope);
    const signals = [AbortSignal.timeout(REFRESH_TIMEOUT_MS), ...(signal ? [signal] : [])];
    let text: string;
    let status: number;
    try {
      const res = await this.fetchImpl(refresh.token_endpoint, {
        method: "POST",
        headers,
        body: params.toString(),
        redirect: "error",
        signal: AbortSignal.any(signals),
      });
      status = res.status;
      text = (await res.text()).slice(0, MAX_TOKEN_RESPONSE_CHARS);
    } catch (err) {
      if (signal?.aborted) throw signal.reason;
      throw fail(`refreshing vault credential ${credential.id} failed: token endpoint unreachable (${(err as Error).name})`);
    }
    if (status < 200 || status >= 300)
      throw fail(`refreshing vault credential ${credential.id} failed: token endpoint answered HTTP ${status}`);
    let token: z.infer<typeof tokenResponseSchema>;
    try {
      token = tokenResponseSchema.parse(JSON.parse(text));
    } catch {
      throw fail(`refreshing vault credential ${credential.id} failed: token endpoint returned no usable access_token`);
    }
    this.redactor.add(token.access_token);
    this.redactor.add(token.refresh_token);
    await this.persistRefresh(credential, token);
    return token.access_token;
  }

  /**
   * Stores the refreshed tokens with a write conditional on the secret we
   * read: if another process refreshed first, its row wins and we still use
   * the token we were just issued for this run.
   */
  private async persistRefresh(credential: StoredCredential, token: z.infer<typeof tokenResponseSchema>): Promise<void> {
    const nowMs = this.now();
    const nextSecret: StoredSecret = { ...credential.secret, access_token: token.access_token };
    if (token.refresh_token) nextSecret.refresh_token = token.refresh_token;
    const expiresAt = token.expires_in ? new Date(nowMs + token.expires_in * 1000).toISOString() : null;
    const body = JSON.parse(credential.rawBody) as { auth: Record<string, unknown>; updated_at?: string };
    body.auth = { ...body.auth, expires_at: expiresAt };
    body.updated_at = new Date(nowMs).toISOString();
    const rawSecret = sealVaultSecret(this.box, credential.id, JSON.stringify(nextSecret));
    const rawBody = JSON.stringify(body);
    const result = await this.storage.db
      .updateTable("vault_credentials")
      .set({ secret: rawSecret, body: rawBody, updated_at: body.updated_at })
      .where("id", "=", credential.id)
      .where("secret", "=", credential.rawSecret)
      .where("archived_at", "is", null)
      .executeTakeFirst();
    credential.secret = nextSecret;
    if (Number(result.numUpdatedRows) === 1) {
      credential.rawSecret = rawSecret;
      credential.rawBody = rawBody;
      const parsed = bodySchema.safeParse(body);
      if (parsed.success) credential.auth = parsed.data.auth;
      return;
    }
    const row = await this.storage.db
      .selectFrom("vault_credentials")
      .select(["id", "vault_id", "body", "secret"])
      .where("id", "=", credential.id)
      .executeTakeFirst();
    const fresh = row ? parseRow(row, this.box) : null;
    if (fresh && !fresh.unreadable) {
      credential.rawSecret = fresh.rawSecret;
      credential.rawBody = fresh.rawBody;
      credential.auth = fresh.auth;
      for (const value of Object.values(fresh.secret)) if (typeof value === "string") this.redactor.add(value);
    }
  }

  /**
   * The environment_variable credentials whose secret may be substituted into
   * a request header for `host`: `injection_location.header` on, and the host
   * allowed by the credential's own `networking`. A credential that would
   * apply but whose secret cannot be opened throws CredentialUnreadableError:
   * the request fails closed rather than go out without its credential.
   */
  headerSubstitutions(host: string): HeaderSubstitution[] {
    const out: HeaderSubstitution[] = [];
    for (const c of this.credentials) {
      const auth = c.auth;
      if (auth.type !== "environment_variable" || !auth.injection_location.header) continue;
      if (!ENV_NAME.test(auth.secret_name)) continue;
      if (auth.networking.type === "limited" && !hostMatchesAnyPattern(host, auth.networking.allowed_hosts)) continue;
      if (out.some((s) => s.name === auth.secret_name)) continue; // first credential with a name wins
      if (c.unreadable) throw new CredentialUnreadableError(c);
      const value = c.secret.secret_value;
      if (!value) continue;
      out.push({ name: auth.secret_name, value });
    }
    return out;
  }

  /**
   * environment_variable credentials naming hosts that an environment's
   * `limited` networking does not allow (§5.5 credential_host_unreachable_error).
   */
  unreachableCredentialHosts(environment: unknown): UnreachableCredential[] {
    const allowed = environmentAllowedHosts(environment);
    if (allowed === null) return [];
    const out: UnreachableCredential[] = [];
    for (const c of this.credentials) {
      if (c.auth.type !== "environment_variable" || c.auth.networking.type !== "limited") continue;
      const hosts = c.auth.networking.allowed_hosts.filter((h) => !allowed.some((outer) => patternCoveredBy(h, outer)));
      if (hosts.length > 0) out.push({ credentialId: c.id, vaultId: c.vaultId, hosts });
    }
    return out;
  }
}

/**
 * Replaces `${NAME}` and `$NAME` placeholders with the credential's value.
 * A placeholder with no substitution is left as written, so a request to a
 * host the credential does not cover carries the placeholder, not the secret.
 */
export function substitutePlaceholders(value: string, subs: readonly HeaderSubstitution[]): string {
  let out = value;
  for (const sub of subs) {
    // Names are checked against ENV_NAME, so they are regex-safe; the replacement is a function so `$` in a secret stays literal.
    if (!ENV_NAME.test(sub.name)) continue;
    const re = new RegExp(`\\$\\{${sub.name}\\}|\\$${sub.name}(?![A-Za-z0-9_])`, "g");
    out = out.replace(re, () => sub.value);
  }
  return out;
}

/** The §5.5 object the loop emits as `session.error`. */
export interface CredentialHostUnreachableError {
  type: "credential_host_unreachable_error";
  message: string;
  credential_id: string;
  vault_id: string;
  retry_status: { type: "terminal" };
}

/**
 * Checks a session's environment_variable credentials against its
 * environment's `limited` networking before the run uses them: one
 * `credential_host_unreachable_error` per credential naming a host the
 * environment does not allow. Host names are configuration, not secrets.
 */
export async function credentialHostErrors(ctx: {
  storage: Storage;
  vaultIds: readonly string[];
  environment: unknown;
  secrets?: SecretBox | undefined;
}): Promise<CredentialHostUnreachableError[]> {
  const credentials = await SessionCredentials.load(ctx.storage, ctx.vaultIds, { secrets: ctx.secrets });
  return credentials.unreachableCredentialHosts(ctx.environment).map((u) => ({
    type: "credential_host_unreachable_error",
    message: `vault credential ${u.credentialId} allows host(s) ${u.hosts.join(", ")} that the environment's networking does not permit`,
    credential_id: u.credentialId,
    vault_id: u.vaultId,
    retry_status: { type: "terminal" },
  }));
}
