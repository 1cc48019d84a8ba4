/**
 * OpenMA's Cloudflare Worker: the official Sandbox Bridge routes (`/v1`,
 * mounted from `@cloudflare/sandbox/bridge`, so a bridge client works
 * unchanged), plus `PUT /openma/v1/sandbox/:id/egress`, where the control
 * plane sets a sandbox's networking and credentials (ADR 0019).
 *
 * `OpenmaSandbox` turns the container's internet off and registers one
 * catch-all outbound handler for HTTP and HTTPS: every request the
 * container sends reaches `outbound`, which reads the sandbox's egress from
 * its Durable Object and applies `egressFetch` (allowed hosts, credential
 * substitution). The container holds placeholders only.
 */
import { ContainerProxy, getSandbox, Sandbox } from "@cloudflare/sandbox";
import { bridge, WarmPool } from "@cloudflare/sandbox/bridge";
import { EgressConfigInput, egressFetch, prepareEgress, refusal, type StoredEgress } from "../src/egress.ts";

export { ContainerProxy, WarmPool };

export interface Env {
  Sandbox: DurableObjectNamespace<OpenmaSandbox>;
  WarmPool: DurableObjectNamespace;
  SANDBOX_API_KEY?: string;
}

const EGRESS_KEY = "openma:egress";

/** The catch-all handler ContainerProxy calls for each HTTP/HTTPS request of a container (outside the Durable Object). */
export async function outbound(request: Request, env: Env, ctx: { containerId: string }): Promise<Response> {
  let egress: StoredEgress | null;
  try {
    egress = await env.Sandbox.get(env.Sandbox.idFromString(ctx.containerId)).egressState();
  } catch (err) {
    return refusal(403, `cannot read this sandbox's egress configuration: ${err instanceof Error ? err.message : String(err)}`);
  }
  return egressFetch(request, egress, {
    upstream: (r) => fetch(r),
    // Workers Logs: names and hosts only, never a header, body or secret.
    onAudit: (event) => console.log(JSON.stringify({ ...event, sandbox: ctx.containerId })),
  });
}

export class OpenmaSandbox extends Sandbox<Env> {
  // The container's only way out is `outbound`: no direct internet, HTTPS terminated by the platform and handed to it too.
  override enableInternet = false;
  override interceptHttps = true;
  static {
    OpenmaSandbox.outbound = outbound as never;
  }

  /** Read by `outbound` (same Worker, over RPC); never exposed on an HTTP route. */
  async egressState(): Promise<StoredEgress | null> {
    return (await this.ctx.storage.get<StoredEgress>(EGRESS_KEY)) ?? null;
  }

  /**
   * Stores the egress (secrets included: Durable Object storage, never the
   * container) and returns the placeholders the control plane puts into the
   * sandbox's processes (a bridge session's `env`). Replacing it mints new
   * placeholders, so old ones stop working. It may be set on a running
   * container: the bridge's warm pool starts containers before they belong
   * to a sandbox, and until then `outbound` lets nothing out.
   */
  async configureEgress(input: EgressConfigInput): Promise<{ env: Record<string, string> }> {
    const { stored, env } = prepareEgress(input);
    await this.ctx.storage.put(EGRESS_KEY, stored);
    return { env };
  }
}

function authorized(request: Request, token: string | undefined): boolean {
  if (!token) return false; // this route carries secrets: never open, unlike the bridge's optional key
  const header = request.headers.get("authorization") ?? "";
  const given = header.toLowerCase().startsWith("bearer ") ? header.slice(7) : "";
  const a = new TextEncoder().encode(given);
  const b = new TextEncoder().encode(token);
  return a.byteLength === b.byteLength && crypto.subtle.timingSafeEqual(a, b);
}

const EGRESS_ROUTE = /^\/openma\/v1\/sandbox\/([a-z2-7]{1,128})\/egress$/;

async function configure(request: Request, env: Env, sandboxId: string): Promise<Response> {
  const parsed = EgressConfigInput.safeParse(await request.json().catch(() => null));
  if (!parsed.success) return Response.json({ error: parsed.error.message, code: "invalid_request" }, { status: 400 });
  // The bridge maps a sandbox id to a container through its warm pool; resolve it the same way so both reach one Durable Object.
  const pool = env.WarmPool.get(env.WarmPool.idFromName("global-pool")) as unknown as { getContainer(id: string): Promise<string> };
  const containerUUID = await pool.getContainer(sandboxId);
  const stub = getSandbox(env.Sandbox, containerUUID, { enableDefaultSession: false }) as unknown as OpenmaSandbox;
  try {
    return Response.json(await stub.configureEgress(parsed.data));
  } catch (err) {
    return Response.json({ error: err instanceof Error ? err.message : String(err), code: "invalid_request" }, { status: 400 });
  }
}

export default bridge({
  async fetch(request: Request, env: Env): Promise<Response> {
    const match = EGRESS_ROUTE.exec(new URL(request.url).pathname);
    if (!match) return new Response("Not Found", { status: 404 });
    if (request.method !== "PUT") return new Response("Method Not Allowed", { status: 405 });
    if (!authorized(request, env.SANDBOX_API_KEY)) return Response.json({ error: "Unauthorized", code: "unauthorized" }, { status: 401 });
    return configure(request, env, match[1] as string);
  },
});
