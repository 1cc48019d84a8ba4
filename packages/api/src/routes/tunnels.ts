/**
 * `/v1/tunnels` (SDK `beta.tunnels`, beta `mcp-tunnels-2026-06-22`): MCP
 * tunnels and the CA certificates they trust. A self-hosted server keeps the
 * records (so configuration written for the hosted API carries over) but
 * runs no tunnel edge: a connector has nothing to dial, so the tunnel token
 * (`reveal_token`, `rotate_token`) answers the SDK's BadRequestError saying
 * why, and the tunnel's `domain` is under `.invalid`, which never resolves.
 * The connector side is in docs/api.md: an MCP server this server can reach
 * is named by its URL directly. Certificates are parsed (X.509, must be a
 * CA) and identified by the SHA-256 fingerprint of their DER.
 */
import { X509Certificate } from "node:crypto";
import { type Context, Hono } from "hono";
import { sql } from "kysely";
import { z } from "zod";
import { betaGate, notHonoured } from "../beta-gate.ts";
import type { AppEnv } from "../context.ts";
import { badRequest, notFound } from "../errors.ts";
import { listDocuments, pageQuery } from "../pagination.ts";
import { fromJson, newIdFor, nowIso, pathId } from "../util.ts";
import { parseJsonBody, parseQuery, queryBool } from "../validate.ts";

export const TUNNELS_BETA = "mcp-tunnels-2026-06-22";
const MAX_PEM = 64 * 1024;

export interface Tunnel {
  id: string;
  type: "tunnel";
  archived_at: string | null;
  created_at: string;
  display_name: string | null;
  domain: string;
}

export interface TunnelCertificate {
  id: string;
  type: "tunnel_certificate";
  archived_at: string | null;
  created_at: string;
  expires_at: string | null;
  fingerprint: string;
  tunnel_id: string;
}

export const tunnelListQuery = z.object({ ...pageQuery(100), include_archived: queryBool.optional() });

async function loadTunnel(c: Context<AppEnv>, id: string): Promise<Tunnel> {
  const row = await c.get("deps").storage.db.selectFrom("tunnels").select("body").where("id", "=", id).executeTakeFirst();
  if (!row) throw notFound("tunnel", id);
  return fromJson<Tunnel>(row.body);
}

async function loadCertificate(c: Context<AppEnv>, tunnelId: string, id: string): Promise<TunnelCertificate> {
  const row = await c
    .get("deps")
    .storage.db.selectFrom("tunnel_certificates")
    .select("body")
    .where("id", "=", id)
    .where("tunnel_id", "=", tunnelId)
    .executeTakeFirst();
  if (!row) throw notFound("tunnel certificate", id);
  return fromJson<TunnelCertificate>(row.body);
}

/** The certificate a PEM holds, or a 400 that says what is wrong with it. */
function parseCaCertificate(pem: string): X509Certificate {
  let cert: X509Certificate;
  try {
    cert = new X509Certificate(pem);
  } catch {
    throw badRequest("ca_certificate_pem: not a PEM-encoded X.509 certificate");
  }
  if (!cert.ca) throw badRequest("ca_certificate_pem: the certificate is not a CA certificate (basicConstraints CA:TRUE)");
  return cert;
}

export const tunnelCreateSchema = z.object({ display_name: z.string().max(256).nullable().optional() });
export const tunnelRotateTokenSchema = z.object({ reason: z.string().max(1024).nullable().optional() });
export const certificateCreateSchema = z.object({ ca_certificate_pem: z.string().min(1).max(MAX_PEM) });

const NO_EDGE =
  "this self-hosted server runs no tunnel edge, so there is no tunnel token for a connector to use; name the MCP server by a URL this server can reach instead (docs/api.md)";

export function tunnelRoutes(): Hono<AppEnv> {
  const r = new Hono<AppEnv>();
  r.use("*", betaGate(TUNNELS_BETA));

  r.post("/", async (c) => {
    const input = await parseJsonBody(c, tunnelCreateSchema, { allowEmpty: true });
    const now = nowIso(c);
    const id = newIdFor(c, "tunl");
    const tunnel: Tunnel = {
      id,
      type: "tunnel",
      archived_at: null,
      created_at: now,
      display_name: input.display_name ?? null,
      domain: `${id.toLowerCase().replaceAll("_", "-")}.tunnel.invalid`,
    };
    await c
      .get("deps")
      .storage.db.insertInto("tunnels")
      .values({ id, body: JSON.stringify(tunnel), created_at: now, archived_at: null })
      .execute();
    return c.json(tunnel);
  });

  r.get("/", async (c) => {
    const q = parseQuery(c, tunnelListQuery);
    return c.json(await listDocuments<Tunnel>(c.get("deps").storage.db, "tunnels", q));
  });

  r.get("/:tunnel_id", async (c) => c.json(await loadTunnel(c, pathId(c, "tunnel_id"))));

  r.post("/:tunnel_id/archive", async (c) => {
    const tunnel = await loadTunnel(c, pathId(c, "tunnel_id"));
    if (tunnel.archived_at) return c.json(tunnel);
    const next = { ...tunnel, archived_at: nowIso(c) };
    await c
      .get("deps")
      .storage.db.updateTable("tunnels")
      .set({ body: JSON.stringify(next), archived_at: next.archived_at })
      .where("id", "=", tunnel.id)
      .execute();
    return c.json(next);
  });

  r.post("/:tunnel_id/reveal_token", async (c) => {
    await loadTunnel(c, pathId(c, "tunnel_id"));
    throw notHonoured(NO_EDGE);
  });

  r.post("/:tunnel_id/rotate_token", async (c) => {
    await loadTunnel(c, pathId(c, "tunnel_id"));
    await parseJsonBody(c, tunnelRotateTokenSchema, { allowEmpty: true });
    throw notHonoured(NO_EDGE);
  });

  r.post("/:tunnel_id/certificates", async (c) => {
    const tunnel = await loadTunnel(c, pathId(c, "tunnel_id"));
    const input = await parseJsonBody(c, certificateCreateSchema);
    if (tunnel.archived_at) throw badRequest("tunnel is archived; it takes no new certificates");
    const cert = parseCaCertificate(input.ca_certificate_pem);
    const fingerprint = cert.fingerprint256.toLowerCase();
    const db = c.get("deps").storage.db;
    const existing = await db
      .selectFrom("tunnel_certificates")
      .select("body")
      .where("tunnel_id", "=", tunnel.id)
      .where("fingerprint", "=", fingerprint)
      .where("archived_at", "is", null)
      .executeTakeFirst();
    // The same CA twice is the same trust: answer the certificate already on record.
    if (existing) return c.json(fromJson<TunnelCertificate>(existing.body));
    const now = nowIso(c);
    const doc: TunnelCertificate = {
      id: newIdFor(c, "tunlcert"),
      type: "tunnel_certificate",
      archived_at: null,
      created_at: now,
      expires_at: new Date(cert.validTo).toISOString(),
      fingerprint,
      tunnel_id: tunnel.id,
    };
    await db
      .insertInto("tunnel_certificates")
      .values({ id: doc.id, tunnel_id: tunnel.id, fingerprint, body: JSON.stringify(doc), created_at: now, archived_at: null })
      .execute();
    return c.json(doc);
  });

  r.get("/:tunnel_id/certificates", async (c) => {
    const tunnel = await loadTunnel(c, pathId(c, "tunnel_id"));
    const q = parseQuery(c, tunnelListQuery);
    const where = [sql<boolean>`tunnel_id = ${tunnel.id}`];
    return c.json(await listDocuments<TunnelCertificate>(c.get("deps").storage.db, "tunnel_certificates", { ...q, where }));
  });

  r.get("/:tunnel_id/certificates/:certificate_id", async (c) =>
    c.json(await loadCertificate(c, pathId(c, "tunnel_id"), pathId(c, "certificate_id"))),
  );

  r.post("/:tunnel_id/certificates/:certificate_id/archive", async (c) => {
    const cert = await loadCertificate(c, pathId(c, "tunnel_id"), pathId(c, "certificate_id"));
    if (cert.archived_at) return c.json(cert);
    const next = { ...cert, archived_at: nowIso(c) };
    await c
      .get("deps")
      .storage.db.updateTable("tunnel_certificates")
      .set({ body: JSON.stringify(next), archived_at: next.archived_at })
      .where("id", "=", cert.id)
      .execute();
    return c.json(next);
  });
  return r;
}
