/**
 * The stand-in apiserver's REST surface through the unmodified official
 * `@kubernetes/client-node`, loaded from the kubeconfig the stand-in wrote:
 * schema validation from the upstream CRDs (Invalid, defaults, pruning),
 * AlreadyExists, optimistic concurrency (Conflict), NotFound as a Status,
 * label selectors, the status subresource, merge and JSON patch, discovery
 * (KubernetesObjectApi resolves kinds through it), and watch streams
 * (current state, then live events; a resumed watch replays from its
 * resourceVersion). No pool has a template here, so no container starts.
 */
import { readFileSync } from "node:fs";
import {
  ApiException,
  ApisApi,
  CustomObjectsApi,
  KubeConfig,
  KubernetesObjectApi,
  PatchStrategy,
  setHeaderOptions,
  Watch,
} from "@kubernetes/client-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type KubernetesStandIn, startKubernetesStandIn } from "./server.ts";

const G = "extensions.agents.x-k8s.io";
const V = "v1beta1";
const NS = "default";

let standIn: KubernetesStandIn;
let kc: KubeConfig;
let api: CustomObjectsApi;

beforeAll(async () => {
  standIn = await startKubernetesStandIn();
  kc = new KubeConfig();
  kc.loadFromFile(standIn.kubeconfigPath);
  api = kc.makeApiClient(CustomObjectsApi);
});
afterAll(async () => {
  await standIn?.close();
});

const claims = { group: G, version: V, namespace: NS, plural: "sandboxclaims" };

async function failure(promise: Promise<unknown>): Promise<{ code: number; body: Record<string, unknown> }> {
  try {
    await promise;
  } catch (err) {
    expect(err).toBeInstanceOf(ApiException);
    const e = err as ApiException<unknown>;
    // The generated client leaves the body as text for most errors (and drops it for an undeclared 401).
    const body = typeof e.body === "string" ? JSON.parse(e.body) : e.body;
    return { code: e.code, body: body as Record<string, unknown> };
  }
  throw new Error("expected the call to fail");
}

describe("the Kubernetes stand-in's REST surface through @kubernetes/client-node", () => {
  it("validates a SandboxClaim against the upstream v1beta1 schema, applying defaults and pruning unknown fields", async () => {
    const missing = await failure(
      api.createNamespacedCustomObject({
        ...claims,
        body: { apiVersion: `${G}/${V}`, kind: "SandboxClaim", metadata: { name: "no-pool" }, spec: {} },
      }),
    );
    expect(missing.code).toBe(422);
    expect(missing.body).toMatchObject({ kind: "Status", status: "Failure", reason: "Invalid", code: 422 });
    expect(String(missing.body.message)).toContain("warmPoolRef");

    const badEnum = await failure(
      api.createNamespacedCustomObject({
        ...claims,
        body: { metadata: { name: "bad-policy" }, spec: { warmPoolRef: { name: "p" }, lifecycle: { shutdownPolicy: "Sometimes" } } },
      }),
    );
    expect(badEnum.code).toBe(422);
    expect(String(badEnum.body.message)).toContain("Delete, DeleteForeground, Retain");

    const badName = await failure(
      api.createNamespacedCustomObject({ ...claims, body: { metadata: { name: "Not_A_Name" }, spec: { warmPoolRef: { name: "p" } } } }),
    );
    expect(badName.code).toBe(422);

    const created = (await api.createNamespacedCustomObject({
      ...claims,
      body: {
        metadata: { name: "c1", labels: { team: "a" } },
        spec: { warmPoolRef: { name: "absent" }, lifecycle: {}, surprise: 1 },
        status: { forged: true },
      },
    })) as { metadata: Record<string, unknown>; spec: Record<string, unknown>; status?: unknown; apiVersion: string; kind: string };
    expect(created.apiVersion).toBe(`${G}/${V}`);
    expect(created.kind).toBe("SandboxClaim");
    expect(created.spec).toEqual({ warmPoolRef: { name: "absent" }, lifecycle: { shutdownPolicy: "Retain" } });
    expect(created.metadata).toMatchObject({ name: "c1", namespace: NS, generation: 1 });
    expect(created.metadata.uid).toMatch(/^[0-9a-f-]{36}$/);
    expect(created.status).toBeUndefined();

    const dup = await failure(
      api.createNamespacedCustomObject({ ...claims, body: { metadata: { name: "c1" }, spec: { warmPoolRef: { name: "p" } } } }),
    );
    expect(dup.code).toBe(409);
    expect(dup.body).toMatchObject({ reason: "AlreadyExists", details: { name: "c1", group: G, kind: "sandboxclaims" } });
  });

  it("answers NotFound with a Status, refuses a stale resourceVersion with Conflict, and keeps status behind its subresource", async () => {
    const gone = await failure(api.getNamespacedCustomObject({ ...claims, name: "nope" }));
    expect(gone).toMatchObject({
      code: 404,
      body: { reason: "NotFound", message: 'sandboxclaims.extensions.agents.x-k8s.io "nope" not found' },
    });

    await api.createNamespacedCustomObject({ ...claims, body: { metadata: { name: "cas" }, spec: { warmPoolRef: { name: "p1" } } } });
    const first = (await api.getNamespacedCustomObject({ ...claims, name: "cas" })) as {
      metadata: { resourceVersion: string; generation: number };
      spec: { warmPoolRef: { name: string } };
    };
    const updated = (await api.replaceNamespacedCustomObject({
      ...claims,
      name: "cas",
      body: { ...first, spec: { warmPoolRef: { name: "p2" } }, status: { sandbox: { name: "x" } } },
    })) as typeof first & { status?: unknown };
    expect(Number(updated.metadata.resourceVersion)).toBeGreaterThan(Number(first.metadata.resourceVersion));
    expect(updated.metadata.generation).toBe(2);
    // A spec write ignores status (what is there is the controller's WarmPoolNotFound, never the body's).
    expect(JSON.stringify(updated.status ?? {})).not.toContain('"x"');
    const stale = await failure(
      api.replaceNamespacedCustomObject({ ...claims, name: "cas", body: { ...first, spec: { warmPoolRef: { name: "p3" } } } }),
    );
    expect(stale).toMatchObject({ code: 409, body: { reason: "Conflict" } });

    const withStatus = (await api.patchNamespacedCustomObjectStatus(
      {
        ...claims,
        name: "cas",
        body: { status: { sandbox: { name: "sb-1", podIPs: ["127.0.10.9"] } }, spec: { warmPoolRef: { name: "ignored" } } },
      },
      setHeaderOptions("Content-Type", PatchStrategy.MergePatch),
    )) as { spec: { warmPoolRef: { name: string } }; status: unknown; metadata: { generation: number } };
    expect(withStatus.status).toMatchObject({ sandbox: { name: "sb-1", podIPs: ["127.0.10.9"] } });
    // A status write ignores spec (and does not bump the generation).
    expect(withStatus.spec.warmPoolRef.name).toBe("p2");
    expect(withStatus.metadata.generation).toBe(2);

    const patched = (await api.patchNamespacedCustomObject(
      { ...claims, name: "cas", body: [{ op: "add", path: "/metadata/labels", value: { via: "json-patch" } }] },
      setHeaderOptions("Content-Type", PatchStrategy.JsonPatch),
    )) as { metadata: { labels: Record<string, string> } };
    expect(patched.metadata.labels).toEqual({ via: "json-patch" });
  });

  it("lists by equality and set-based label selectors and by metadata.name", async () => {
    for (const [name, tier] of [
      ["sel-a", "gold"],
      ["sel-b", "silver"],
      ["sel-c", "bronze"],
    ] as const) {
      await api.createNamespacedCustomObject({
        ...claims,
        body: { metadata: { name, labels: { suite: "sel", tier } }, spec: { warmPoolRef: { name: "p" } } },
      });
    }
    const names = async (labelSelector?: string, fieldSelector?: string) =>
      (
        (await api.listNamespacedCustomObject({ ...claims, labelSelector, fieldSelector })) as { items: { metadata: { name: string } }[] }
      ).items.map((i) => i.metadata.name);
    expect(await names("suite=sel,tier!=silver")).toEqual(["sel-a", "sel-c"]);
    expect(await names("suite=sel,tier in (silver, bronze)")).toEqual(["sel-b", "sel-c"]);
    expect(await names("suite=sel,tier notin (gold)")).toEqual(["sel-b", "sel-c"]);
    expect(await names("suite,!nothere,tier==gold")).toEqual(["sel-a"]);
    expect(await names("suite=sel", "metadata.name=sel-b")).toEqual(["sel-b"]);
    const bad = await failure(api.listNamespacedCustomObject({ ...claims, fieldSelector: "spec.warmPoolRef.name=p" }));
    expect(bad).toMatchObject({ code: 400, body: { reason: "BadRequest" } });
  });

  it("serves discovery: KubernetesObjectApi resolves SandboxWarmPool and Sandbox by kind", async () => {
    const objects = KubernetesObjectApi.makeApiClient(kc);
    await objects.create({
      apiVersion: `${G}/${V}`,
      kind: "SandboxWarmPool",
      metadata: { name: "disc", namespace: NS },
      spec: { sandboxTemplateRef: { name: "absent" } },
    });
    const pool = (await objects.read({ apiVersion: `${G}/${V}`, kind: "SandboxWarmPool", metadata: { name: "disc", namespace: NS } })) as {
      spec: Record<string, unknown>;
    };
    // `replicas` defaults to 1 in v1beta1.
    expect(pool.spec).toEqual({ sandboxTemplateRef: { name: "absent" }, replicas: 1 });
    const sandboxes = await objects.list("agents.x-k8s.io/v1beta1", "Sandbox", NS);
    expect(sandboxes.items).toEqual([]);
    const groups = await kc.makeApiClient(ApisApi).getAPIVersions();
    expect(groups.groups.map((g) => g.name).sort()).toEqual(["agents.x-k8s.io", G]);
    // A wrong token is refused with a Status.
    const stranger = new KubeConfig();
    stranger.loadFromString(readFileSync(standIn.kubeconfigPath, "utf8").replace(standIn.token, "not-the-token"));
    const refused = await failure(stranger.makeApiClient(ApisApi).getAPIVersions());
    expect(refused.code).toBe(401);
  });

  it("streams a watch: the current state as ADDED, then live events; a resumed watch replays from its resourceVersion", async () => {
    const path = `/apis/${G}/${V}/namespaces/${NS}/sandboxclaims`;
    const live = (await openWatch(path, { labelSelector: "suite=watch" }, "DELETED w1")).events;
    const w1 = (await api.createNamespacedCustomObject({
      ...claims,
      body: { metadata: { name: "w1", labels: { suite: "watch" } }, spec: { warmPoolRef: { name: "p" } } },
    })) as { metadata: { resourceVersion: string } };
    await api.createNamespacedCustomObject({ ...claims, body: { metadata: { name: "other" }, spec: { warmPoolRef: { name: "p" } } } });
    await api.deleteNamespacedCustomObject({ ...claims, name: "w1" });
    // ADDED, then the emulated controller's status writes (WarmPoolNotFound), then DELETED; nothing of "other".
    const events = await live;
    expect(events[0]).toBe("ADDED w1");
    expect(events.slice(1, -1).every((e) => e === "MODIFIED w1")).toBe(true);

    // Resumed from the create's resourceVersion: only what came after it.
    const replayed = await (
      await openWatch(path, { resourceVersion: w1.metadata.resourceVersion, labelSelector: "suite=watch" }, "DELETED w1")
    ).events;
    expect(replayed).not.toContain("ADDED w1");
    expect(replayed.at(-1)).toBe("DELETED w1");
    // Without one: the current state (w1 is gone, "other" is there).
    expect(await (await openWatch(path, { fieldSelector: "metadata.name=other" }, "ADDED other")).events).toEqual(["ADDED other"]);
  });
});

/** Opens a watch; resolves once it is connected, with the promise of its events (type and name) up to `last`, after which it is aborted. */
async function openWatch(path: string, query: Record<string, string>, last: string): Promise<{ events: Promise<string[]> }> {
  const seen: string[] = [];
  let resolve: (events: string[]) => void = () => {};
  const done = new Promise<string[]>((r) => {
    resolve = r;
  });
  const controller = await new Watch(kc).watch(
    path,
    query,
    (type, obj: { metadata: { name: string } }) => {
      seen.push(`${type} ${obj.metadata.name}`);
      if (seen.at(-1) === last) resolve(seen);
    },
    () => {},
  );
  return {
    events: done.then((events) => {
      controller.abort();
      return events;
    }),
  };
}
