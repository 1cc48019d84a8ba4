/**
 * Vault and credential request schemas, and the split of a credential's
 * `auth` into its public part (returned) and its secret part (stored in the
 * `secret` column, never returned). Secret values never appear in error
 * messages: issues name the field, not the value.
 */
import { z } from "zod";
import { badRequest } from "../errors.ts";
import { metadataPatchSchema, metadataSchema } from "../validate.ts";

const SECRET_MAX = 16_384;
const secretValue = z.string().min(1).max(SECRET_MAX);
const httpUrl = z.url({ protocol: /^https?$/ }).max(2048);
const rfc3339 = z.iso.datetime({ offset: true });

export const vaultCreateSchema = z.object({
  display_name: z.string().min(1).max(255),
  metadata: metadataSchema.optional(),
});

export const vaultUpdateSchema = z.object({
  display_name: z.string().min(1).max(255).nullish(),
  metadata: metadataPatchSchema.nullish(),
});

// Hosts: bare hostname, IPv4 address, or `*.` wildcard; no URLs, ports, paths or IPv6.
const LABEL = "[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?";
const HOSTNAME = new RegExp(`^(?:\\*\\.)?${LABEL}(?:\\.${LABEL})*$`, "i");
const IPV4 = /^(?:(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)\.){3}(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)$/;
const allowedHost = z
  .string()
  .min(1)
  .max(253)
  .refine(
    (h) => IPV4.test(h) || (HOSTNAME.test(h) && !/^\*\.\d+(\.\d+){3}$/.test(h)),
    "must be a hostname, an IPv4 address or a *. wildcard",
  )
  .transform((h) => h.toLowerCase());

const networking = z.discriminatedUnion("type", [
  z.object({ type: z.literal("unrestricted") }),
  z.object({ type: z.literal("limited"), allowed_hosts: z.array(allowedHost).min(1).max(16) }),
]);

const injectionLocation = z.object({ header: z.boolean().optional(), body: z.boolean().optional() });

const tokenEndpointAuth = z.discriminatedUnion("type", [
  z.object({ type: z.literal("none") }),
  z.object({ type: z.literal("client_secret_basic"), client_secret: secretValue }),
  z.object({ type: z.literal("client_secret_post"), client_secret: secretValue }),
]);

const staticBearerCreate = z.object({ type: z.literal("static_bearer"), mcp_server_url: httpUrl, token: secretValue });

const mcpOAuthCreate = z.object({
  type: z.literal("mcp_oauth"),
  mcp_server_url: httpUrl,
  access_token: secretValue,
  expires_at: rfc3339.nullish(),
  refresh: z
    .object({
      client_id: z.string().min(1).max(1024),
      refresh_token: secretValue,
      token_endpoint: httpUrl,
      token_endpoint_auth: tokenEndpointAuth,
      resource: z.string().max(2048).nullish(),
      scope: z.string().max(2048).nullish(),
    })
    .nullish(),
});

const environmentVariableCreate = z.object({
  type: z.literal("environment_variable"),
  secret_name: z
    .string()
    .min(1)
    .max(256)
    .regex(/^[A-Za-z_][A-Za-z0-9_]*$/, "must be an environment variable name ([A-Za-z_][A-Za-z0-9_]*)"),
  secret_value: secretValue,
  networking,
  injection_location: injectionLocation.optional(),
});

export const credentialCreateSchema = z.object({
  auth: z.discriminatedUnion("type", [staticBearerCreate, mcpOAuthCreate, environmentVariableCreate]),
  display_name: z.string().max(255).nullish(),
  metadata: metadataSchema.optional(),
});

const secretUpdate = secretValue.nullish();

const credentialAuthUpdate = z.discriminatedUnion("type", [
  z.object({ type: z.literal("static_bearer"), token: secretUpdate }),
  z.object({
    type: z.literal("mcp_oauth"),
    access_token: secretUpdate,
    expires_at: rfc3339.nullish(),
    refresh: z
      .object({
        refresh_token: secretUpdate,
        scope: z.string().max(2048).nullish(),
        token_endpoint_auth: z
          .object({ type: z.enum(["client_secret_basic", "client_secret_post"]), client_secret: secretUpdate })
          .optional(),
      })
      .nullish(),
  }),
  z.object({
    type: z.literal("environment_variable"),
    injection_location: injectionLocation.optional(),
    networking: networking.nullish(),
    secret_value: secretUpdate,
  }),
]);

export const credentialUpdateSchema = z.object({
  auth: credentialAuthUpdate.optional(),
  display_name: z.string().max(255).nullish(),
  metadata: metadataPatchSchema.nullish(),
});

export type CredentialCreate = z.infer<typeof credentialCreateSchema>;
export type CredentialAuthUpdate = z.infer<typeof credentialAuthUpdate>;

/** The public (returned) part of a credential's auth. */
export type CredentialAuth =
  | { type: "static_bearer"; mcp_server_url: string }
  | {
      type: "mcp_oauth";
      mcp_server_url: string;
      expires_at: string | null;
      refresh: {
        client_id: string;
        token_endpoint: string;
        token_endpoint_auth: { type: "none" | "client_secret_basic" | "client_secret_post" };
        resource: string | null;
        scope: string | null;
      } | null;
    }
  | {
      type: "environment_variable";
      secret_name: string;
      injection_location: { header: boolean; body: boolean };
      networking: { type: "unrestricted" } | { type: "limited"; allowed_hosts: string[] };
    };

/** The secret part, stored as JSON in `vault_credentials.secret`. */
export interface CredentialSecret {
  token?: string;
  access_token?: string;
  refresh_token?: string;
  client_secret?: string;
  secret_value?: string;
}

function canonicalTime(value: string | null | undefined, nowMs: number): string | null {
  if (value === null || value === undefined) return null;
  const ms = Date.parse(value);
  if (ms <= nowMs) throw badRequest("auth.expires_at: must be in the future");
  return new Date(ms).toISOString();
}

function resolveInjection(current: { header: boolean; body: boolean }, patch: { header?: boolean; body?: boolean } | undefined) {
  const next = { header: patch?.header ?? current.header, body: patch?.body ?? current.body };
  if (!next.header && !next.body) throw badRequest("auth.injection_location: at least one of header or body must be enabled");
  return next;
}

/** Splits a create request's auth into its public and secret parts. */
export function splitAuth(auth: CredentialCreate["auth"], nowMs: number): { auth: CredentialAuth; secret: CredentialSecret } {
  switch (auth.type) {
    case "static_bearer":
      return { auth: { type: auth.type, mcp_server_url: auth.mcp_server_url }, secret: { token: auth.token } };
    case "mcp_oauth": {
      const refresh = auth.refresh ?? null;
      const secret: CredentialSecret = { access_token: auth.access_token };
      if (refresh) {
        secret.refresh_token = refresh.refresh_token;
        if (refresh.token_endpoint_auth.type !== "none") secret.client_secret = refresh.token_endpoint_auth.client_secret;
      }
      return {
        auth: {
          type: "mcp_oauth",
          mcp_server_url: auth.mcp_server_url,
          expires_at: canonicalTime(auth.expires_at, nowMs),
          refresh: refresh && {
            client_id: refresh.client_id,
            token_endpoint: refresh.token_endpoint,
            token_endpoint_auth: { type: refresh.token_endpoint_auth.type },
            resource: refresh.resource ?? null,
            scope: refresh.scope ?? null,
          },
        },
        secret,
      };
    }
    case "environment_variable":
      return {
        auth: {
          type: "environment_variable",
          secret_name: auth.secret_name,
          injection_location: resolveInjection({ header: true, body: false }, auth.injection_location),
          networking: auth.networking,
        },
        secret: { secret_value: auth.secret_value },
      };
  }
}

function applyOAuthUpdate(
  current: Extract<CredentialAuth, { type: "mcp_oauth" }>,
  secret: CredentialSecret,
  patch: Extract<CredentialAuthUpdate, { type: "mcp_oauth" }>,
  nowMs: number,
): { auth: CredentialAuth; secret: CredentialSecret } {
  const next = { ...current };
  const nextSecret = { ...secret };
  if (patch.access_token) nextSecret.access_token = patch.access_token;
  if (patch.expires_at !== undefined) next.expires_at = canonicalTime(patch.expires_at, nowMs);
  if (patch.refresh === null) {
    next.refresh = null;
    delete nextSecret.refresh_token;
    delete nextSecret.client_secret;
  } else if (patch.refresh) {
    if (!current.refresh) throw badRequest("auth.refresh: this credential has no refresh configuration to update");
    const refresh = { ...current.refresh };
    if (patch.refresh.refresh_token) nextSecret.refresh_token = patch.refresh.refresh_token;
    if (patch.refresh.scope !== undefined && patch.refresh.scope !== null)
      refresh.scope = patch.refresh.scope === "" ? null : patch.refresh.scope;
    const endpointAuth = patch.refresh.token_endpoint_auth;
    if (endpointAuth) {
      // The stored method is kept even if the other client-secret type is named (SDK docs).
      if (refresh.token_endpoint_auth.type === "none") {
        throw badRequest("auth.refresh.token_endpoint_auth: this credential's token endpoint uses no client secret");
      }
      if (endpointAuth.client_secret) nextSecret.client_secret = endpointAuth.client_secret;
    }
    next.refresh = refresh;
  }
  return { auth: next, secret: nextSecret };
}

/** Applies an update's auth patch; the type must match and immutable fields stay. */
export function applyAuthUpdate(
  current: CredentialAuth,
  secret: CredentialSecret,
  patch: CredentialAuthUpdate,
  nowMs: number,
): { auth: CredentialAuth; secret: CredentialSecret } {
  if (patch.type !== current.type) throw badRequest(`auth.type: this credential is ${current.type}; its type cannot change`);
  if (current.type === "static_bearer" && patch.type === "static_bearer") {
    return { auth: current, secret: patch.token ? { ...secret, token: patch.token } : secret };
  }
  if (current.type === "mcp_oauth" && patch.type === "mcp_oauth") return applyOAuthUpdate(current, secret, patch, nowMs);
  if (current.type === "environment_variable" && patch.type === "environment_variable") {
    return {
      auth: {
        ...current,
        injection_location: resolveInjection(current.injection_location, patch.injection_location),
        networking: patch.networking ?? current.networking,
      },
      secret: patch.secret_value ? { ...secret, secret_value: patch.secret_value } : secret,
    };
  }
  throw badRequest("auth.type: mismatched credential type");
}
