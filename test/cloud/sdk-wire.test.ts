/**
 * The official SDKs' requests for create, exec and kill are the ones each
 * vendor documents, with the documented credential header, so a stand-in
 * cannot drift into a private dialect its SDK happens to tolerate. The
 * table below is written from the vendors' public API references, not from
 * the stand-ins; each test drives the driver (every wire call its SDK's)
 * against the stand-in and compares what arrived on the wire.
 *
 * - E2B: REST API reference (api.e2b.app, `X-API-KEY`): `POST /v2/sandboxes`,
 *   `DELETE /sandboxes/{sandboxID}`; envd (`X-Access-Token`, routed by
 *   `E2b-Sandbox-Id`): `POST /process.Process/Start` (Connect).
 * - Daytona: API reference (app.daytona.io/api, `Authorization: Bearer`):
 *   `POST /sandbox`, `DELETE /sandbox/{sandboxIdOrName}`; toolbox
 *   (`{toolboxProxyUrl}/{sandboxId}`, same bearer): `POST
 *   /process/session/{sessionId}/exec`.
 * - Fly Sprites: REST and exec reference (api.sprites.dev, `Authorization:
 *   Bearer`): `POST /v1/sprites`, WebSocket `/v1/sprites/{name}/exec`,
 *   `DELETE /v1/sprites/{name}`.
 * - Blaxel: control plane reference (api.blaxel.ai/v0, `X-Blaxel-Authorization:
 *   Bearer` with `X-Blaxel-Workspace`): `POST /sandboxes`, `DELETE
 *   /sandboxes/{sandboxName}`; sandbox-api (the sandbox's URL,
 *   `run.blaxel.ai/{workspace}/sandboxes/{name}`, same headers): `POST /process`.
 * - Vercel Sandbox: REST API reference (vercel.com/api, `Authorization:
 *   Bearer` with `?teamId=`): `POST /v3/sandboxes`, `POST
 *   /v2/sandboxes/sessions/{sessionId}/cmd`, `DELETE /v2/sandboxes/{name}`.
 * - Modal: gRPC over HTTP/2 (every call a `POST /<package>.<Service>/<Method>`):
 *   `modal.client.ModalClient/SandboxCreateV2` and `/SandboxTerminateV2` with
 *   the token pair (`x-modal-token-id`, `x-modal-token-secret`) and the
 *   short-lived `x-modal-auth-token` from `AuthTokenGet`; exec on the task's
 *   command router, `modal.task_command_router.TaskCommandRouter/TaskExecStart`,
 *   with the router JWT as `authorization: Bearer`.
 * - Superserve: control plane (api.superserve.ai, `X-API-Key`): `POST
 *   /sandboxes`, `DELETE /sandboxes/{id}`; data plane (the derived
 *   `boxd-{id}.sandbox.superserve.ai`): the exec WebSocket `GET /exec/connect`
 *   with the subprotocols `superserve.exec.v1` and `token.<access token>`
 *   (as the published SDK's README and source, `packages/sdk` of
 *   superserve-ai/superserve, describe it).
 * - BoxRun: BoxLite's OpenAPI (`openapi/box.openapi.yaml` of boxlite-ai/boxlite,
 *   `Authorization: Bearer`, no `{prefix}` slot on a single-tenant server):
 *   `POST /v1/boxes`, `POST /v1/boxes/{box_id}/exec` (then the attach
 *   WebSocket), `DELETE /v1/boxes/{box_id}?force=true`.
 * - Cloudflare Sandbox Bridge: the OpenAPI document `@cloudflare/sandbox`
 *   ships (`Authorization: Bearer $SANDBOX_API_KEY`): `POST
 *   /v1/sandbox/{id}/exec`, `DELETE /v1/sandbox/{id}`. An id's container is
 *   assigned on its first request, so an acquire is three execs at the id
 *   it derives (the ownership look-up, the record's write, the mount points).
 * - Cloudflare (our Worker, docs/cloudflare-worker.md): the same bridge
 *   routes and Bearer, plus the Worker's own `PUT
 *   /openma/v1/sandbox/{id}/egress` once per acquire, before any command of
 *   the session; the placeholders it answers are written outside
 *   /workspace (an upload and a move), so an acquire is four execs.
 */
import type { CloudStandIn, RecordedRequest } from "@openma/standin-kit";
import { afterEach, describe, expect, it } from "vitest";
import { startVendorStandIn, VENDORS, type Vendor, vendorDriver } from "../support/cloud.ts";

interface Documented {
  /** The one credential header the vendor documents for this surface. */
  auth: string;
  create: { method: string; path: RegExp };
  exec: { method: string; path: RegExp };
  kill: { method: string; path: RegExp };
  /** What the official SDK says it is, when it says. */
  userAgent: RegExp | null;
  /** How many requests matching `create` one acquire makes (default 1). */
  creates?: number;
}

const DOCUMENTED: Record<Vendor, Documented & { execAuth?: string }> = {
  e2b: {
    auth: "x-api-key",
    execAuth: "x-access-token",
    create: { method: "POST", path: /^\/v2\/sandboxes$/ },
    exec: { method: "POST", path: /^\/process\.Process\/Start$/ },
    kill: { method: "DELETE", path: /^\/sandboxes\/[A-Za-z0-9]+$/ },
    userAgent: /^e2b-js-sdk\/2\.51\./,
  },
  daytona: {
    auth: "authorization",
    create: { method: "POST", path: /^\/api\/sandbox$/ },
    exec: { method: "POST", path: /^\/toolbox\/[0-9a-f-]{36}\/process\/session\/[^/]+\/exec$/ },
    kill: { method: "DELETE", path: /^\/api\/sandbox\/[0-9a-f-]{36}$/ },
    userAgent: /^sdk-typescript(-legacy)?\/0\.218\./,
  },
  sprites: {
    auth: "authorization",
    create: { method: "POST", path: /^\/v1\/sprites$/ },
    exec: { method: "GET", path: /^\/v1\/sprites\/[a-z0-9-]+\/exec$/ },
    kill: { method: "DELETE", path: /^\/v1\/sprites\/[a-z0-9-]+$/ },
    userAgent: null,
  },
  blaxel: {
    auth: "x-blaxel-authorization",
    create: { method: "POST", path: /^\/v0\/sandboxes$/ },
    exec: { method: "POST", path: /^\/run\/[a-z0-9-]+\/sandboxes\/[a-z0-9-]+\/process$/ },
    kill: { method: "DELETE", path: /^\/v0\/sandboxes\/[a-z0-9-]+$/ },
    userAgent: /^blaxel\/sdk\/typescript\/0\.3\./,
  },
  vercel: {
    auth: "authorization",
    create: { method: "POST", path: /^\/api\/v3\/sandboxes$/ },
    exec: { method: "POST", path: /^\/api\/v2\/sandboxes\/sessions\/[A-Za-z0-9_-]+\/cmd$/ },
    kill: { method: "DELETE", path: /^\/api\/v2\/sandboxes\/[a-z0-9-]+$/ },
    userAgent: /^vercel\/sandbox\/3\.5\./,
  },
  modal: {
    auth: "x-modal-token-id",
    execAuth: "authorization",
    create: { method: "POST", path: /^\/modal\.client\.ModalClient\/SandboxCreateV2$/ },
    exec: { method: "POST", path: /^\/modal\.task_command_router\.TaskCommandRouter\/TaskExecStart$/ },
    kill: { method: "POST", path: /^\/modal\.client\.ModalClient\/SandboxTerminateV2$/ },
    userAgent: /^grpc-node-js\//,
  },
  superserve: {
    auth: "x-api-key",
    // The exec WebSocket's token travels as its `token.<jwt>` subprotocol, next to `superserve.exec.v1`.
    execAuth: "sec-websocket-protocol",
    create: { method: "POST", path: /^\/sandboxes$/ },
    exec: { method: "GET", path: /^\/exec\/connect$/ },
    kill: { method: "DELETE", path: /^\/sandboxes\/[0-9a-f-]{36}$/ },
    userAgent: /^@superserve\/sdk\/0\.8\./,
  },
  boxrun: {
    auth: "authorization",
    create: { method: "POST", path: /^\/v1\/boxes$/ },
    exec: { method: "POST", path: /^\/v1\/boxes\/[A-Za-z0-9._-]+\/exec$/ },
    kill: { method: "DELETE", path: /^\/v1\/boxes\/[A-Za-z0-9._-]+$/ },
    userAgent: null,
  },
  "cloudflare-bridge": {
    auth: "authorization",
    create: { method: "POST", path: /^\/v1\/sandbox\/[a-z2-7]{26}\/exec$/ },
    exec: { method: "POST", path: /^\/v1\/sandbox\/[a-z2-7]{26}\/exec$/ },
    kill: { method: "DELETE", path: /^\/v1\/sandbox\/[a-z2-7]{26}$/ },
    userAgent: null,
    creates: 3,
  },
  cloudflare: {
    auth: "authorization",
    create: { method: "POST", path: /^\/v1\/sandbox\/[a-z2-7]{26}\/exec$/ },
    exec: { method: "POST", path: /^\/v1\/sandbox\/[a-z2-7]{26}\/exec$/ },
    kill: { method: "DELETE", path: /^\/v1\/sandbox\/[a-z2-7]{26}$/ },
    userAgent: null,
    creates: 4,
  },
};

const never = () => new AbortController().signal;

function matching(requests: readonly RecordedRequest[], expected: { method: string; path: RegExp }): RecordedRequest[] {
  return requests.filter((r) => r.method === expected.method && expected.path.test(r.path));
}

describe.each(VENDORS)("the official %s SDK on the wire", (vendor) => {
  let standIn: CloudStandIn | undefined;
  afterEach(async () => {
    await standIn?.close();
  });

  it("sends create, exec and kill as the vendor documents them, with the documented credential header", async () => {
    standIn = await startVendorStandIn(vendor);
    const documented = DOCUMENTED[vendor];
    const driver = vendorDriver(vendor, standIn);
    const scope = { environmentId: "env_wire", sessionId: `sesn_wire_${vendor}` };
    const fence = { scope, ownerId: "owner-wire", generation: 1, expiresAt: Date.now() + 600_000 };
    const acquired = await driver.acquire({
      scope,
      fence,
      workspace: { bindingId: "ws", strategy: "ephemeral", mountPath: "/workspace" },
      outputs: null,
      idempotencyKey: "wire",
      signal: never(),
    });
    if (acquired.type !== "acquired") throw new Error(acquired.reason);
    const createdAt = standIn.requests.length;
    const ran = await driver.toolSandbox(acquired.lease).exec({ command: ["echo", "wire"], timeoutMs: 60_000, signal: never() });
    expect(ran.type === "exited" && Buffer.from(ran.stdout).toString()).toBe("wire\n");
    const ranAt = standIn.requests.length;
    expect(await driver.terminate({ scope, fence, lease: acquired.lease, reason: "completed", signal: never() })).toEqual({
      type: "terminated",
    });
    const requests = standIn.requests;

    const created = matching(requests.slice(0, createdAt), documented.create);
    const execs = matching(requests.slice(createdAt, ranAt), documented.exec);
    const kills = matching(requests.slice(ranAt), documented.kill);
    expect(created).toHaveLength(documented.creates ?? 1);
    expect(execs.length).toBeGreaterThanOrEqual(1);
    expect(kills).toHaveLength(1);
    for (const request of [...created, ...kills]) expect(request).toMatchObject({ authHeader: documented.auth, authorized: true });
    for (const request of execs) expect(request).toMatchObject({ authHeader: documented.execAuth ?? documented.auth, authorized: true });
    if (vendor === "e2b") for (const request of execs) expect(request.headerNames).toContain("e2b-sandbox-id");
    if (vendor === "blaxel")
      for (const request of [...created, ...execs, ...kills]) expect(request.headerNames).toContain("x-blaxel-workspace");
    if (vendor === "vercel")
      for (const request of [...created, ...execs, ...kills]) expect(request.query).toMatch(/[?&]teamId=team_standin(&|$)/);
    if (vendor === "modal")
      for (const request of [...created, ...kills])
        expect(request.headerNames).toEqual(
          expect.arrayContaining(["x-modal-token-secret", "x-modal-auth-token", "x-modal-client-version"]),
        );
    if (vendor === "boxrun") for (const request of kills) expect(request.query).toMatch(/[?&]force=true(&|$)/);
    if (vendor === "cloudflare") {
      // The Worker's egress route, once, with the Bearer, before the mount points' exec (the acquire's last command).
      const egress = matching(requests.slice(0, createdAt), { method: "PUT", path: /^\/openma\/v1\/sandbox\/[a-z2-7]{26}\/egress$/ });
      expect(egress).toHaveLength(1);
      expect(egress[0]).toMatchObject({ authHeader: "authorization", authorized: true });
      expect(requests.indexOf(egress[0] as RecordedRequest)).toBeLessThan(requests.indexOf(created.at(-1) as RecordedRequest));
    }
    if (documented.userAgent) for (const request of [...created, ...kills]) expect(request.userAgent).toMatch(documented.userAgent);

    // Nothing the SDK sent was refused, and nothing was left behind.
    expect(requests.filter((r) => !r.authorized)).toEqual([]);
    expect(standIn.live()).toBe(0);
    expect(await standIn.boxes.containers()).toEqual([]);
  });

  it("is refused with the vendor's 401 when the credential is wrong", async () => {
    standIn = await startVendorStandIn(vendor);
    const wrong = {
      ...standIn,
      env: Object.fromEntries(Object.entries(standIn.env).map(([k, v]) => [k, /KEY|TOKEN/.test(k) ? `${v}-wrong` : v])),
    };
    const driver = vendorDriver(vendor, wrong as CloudStandIn);
    const scope = { environmentId: "env_wire", sessionId: "sesn_wire_denied" };
    const acquired = await driver.acquire({
      scope,
      fence: { scope, ownerId: "owner-wire", generation: 1, expiresAt: Date.now() + 600_000 },
      workspace: { bindingId: "ws", strategy: "ephemeral", mountPath: "/workspace" },
      outputs: null,
      idempotencyKey: "wire",
      signal: never(),
    });
    expect(acquired).toMatchObject({ type: "unavailable", retryable: false });
    expect(standIn.requests.length).toBeGreaterThan(0);
    expect(standIn.requests.every((r) => r.authHeader === DOCUMENTED[vendor].auth && !r.authorized)).toBe(true);
    expect(standIn.live()).toBe(0);
  });
});
