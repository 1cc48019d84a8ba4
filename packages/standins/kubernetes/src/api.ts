/**
 * The REST surface of the stand-in apiserver, as `@kubernetes/client-node`
 * and kubectl use it: discovery (`/api`, `/apis`, `/apis/<g>/<v>`,
 * `/version`), namespaced CRUD with the `/status` subresource, merge and
 * JSON patch, list with label and field selectors (as a meta.k8s.io Table
 * when kubectl asks for one), watch streams as JSON lines, and every error
 * as a `metav1.Status` body.
 */
import type { Scheduler } from "@openma/time";
import type { Context, Hono } from "hono";
import type { ResourceType, ResourceTypes } from "./resources.ts";
import { selector } from "./selectors.ts";
import { badRequest, StatusError } from "./status.ts";
import type { KObject, ObjectStore, StoreEvent } from "./store.ts";
import { tableOf } from "./table.ts";

export interface ApiDeps {
  store: ObjectStore;
  types: ResourceTypes;
  token: string;
  scheduler: Scheduler;
}

type Ctx = Context;

function statusResponse(c: Ctx, error: StatusError): Response {
  return c.json(error.toStatus(), error.code as 400);
}

async function readJson(c: Ctx): Promise<unknown> {
  const text = await c.req.text();
  try {
    return JSON.parse(text);
  } catch {
    throw badRequest(`the request body is not JSON: ${text.slice(0, 80)}`);
  }
}

function resourceOf(deps: ApiDeps, c: Ctx): ResourceType {
  const group = c.req.param("group") ?? "";
  const version = c.req.param("version") ?? "v1";
  const plural = c.req.param("plural") ?? "pods";
  const type = deps.types.find(group, version, plural);
  if (!type) throw new StatusError(404, "NotFound", "the server could not find the requested resource");
  return type;
}

const VERBS = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"];

function mountDiscovery(app: Hono, deps: ApiDeps): void {
  app.get("/version", (c) =>
    c.json({ major: "1", minor: "33", gitVersion: "v1.33.0+openma-standin", platform: "linux/amd64", goVersion: "go1.24" }),
  );
  app.get("/api", (c) =>
    c.json({
      kind: "APIVersions",
      versions: ["v1"],
      serverAddressByClientCIDRs: [{ clientCIDR: "0.0.0.0/0", serverAddress: new URL(c.req.url).host }],
    }),
  );
  app.get("/apis", (c) =>
    c.json({
      kind: "APIGroupList",
      apiVersion: "v1",
      groups: [...deps.types.groups()].map(([name, types]) => {
        const gv = { groupVersion: (types[0] as ResourceType).apiVersion, version: (types[0] as ResourceType).version };
        return { name, versions: [gv], preferredVersion: gv };
      }),
    }),
  );
  const list = (types: ResourceType[], groupVersion: string) => ({
    kind: "APIResourceList",
    apiVersion: "v1",
    groupVersion,
    resources: types.flatMap((t) => [
      {
        name: t.plural,
        singularName: t.singular,
        namespaced: true,
        kind: t.kind,
        verbs: t.validate ? VERBS : ["delete", "get", "list", "watch"],
        shortNames: t.shortNames,
      },
      ...(t.hasStatus
        ? [{ name: `${t.plural}/status`, singularName: "", namespaced: true, kind: t.kind, verbs: ["get", "patch", "update"] }]
        : []),
      ...(t.validate === null
        ? [{ name: `${t.plural}/exec`, singularName: "", namespaced: true, kind: "PodExecOptions", verbs: ["create", "get"] }]
        : []),
    ]),
  });
  app.get("/api/v1", (c) => c.json(list([deps.types.byKind("Pod")], "v1")));
  app.get("/apis/:group", (c) => {
    const types = deps.types.groups().get(c.req.param("group"));
    if (!types) throw new StatusError(404, "NotFound", "the server could not find the requested resource");
    const gv = { groupVersion: (types[0] as ResourceType).apiVersion, version: (types[0] as ResourceType).version };
    return c.json({ kind: "APIGroup", apiVersion: "v1", name: c.req.param("group"), versions: [gv], preferredVersion: gv });
  });
  app.get("/apis/:group/:version", (c) => {
    const types = (deps.types.groups().get(c.req.param("group")) ?? []).filter((t) => t.version === c.req.param("version"));
    if (types.length === 0) throw new StatusError(404, "NotFound", "the server could not find the requested resource");
    return c.json(list(types, `${c.req.param("group")}/${c.req.param("version")}`));
  });
}

function listOf(type: ResourceType, items: KObject[], rv: string) {
  return { kind: `${type.kind}List`, apiVersion: type.apiVersion, metadata: { resourceVersion: rv }, items };
}

function wantsTable(c: Ctx): boolean {
  return (c.req.header("accept") ?? "").includes("as=Table");
}

/** A watch: JSON lines of `{type, object}`, replayed from `resourceVersion` (or the current state), until timeout or close. */
function watchStream(c: Ctx, deps: ApiDeps, type: ResourceType, namespace: string | undefined): Response {
  const match = selector(c.req.query("labelSelector"), c.req.query("fieldSelector"));
  const rvText = c.req.query("resourceVersion");
  const fromRv = rvText === undefined || rvText === "" || rvText === "0" ? null : Number(rvText);
  if (fromRv !== null && !Number.isInteger(fromRv)) throw badRequest(`invalid resourceVersion ${rvText}`);
  const relevant = (e: StoreEvent) =>
    e.resource === type &&
    (namespace === undefined || e.object.metadata.namespace === namespace) &&
    match({ labels: e.object.metadata.labels ?? {}, name: e.object.metadata.name, namespace: e.object.metadata.namespace });
  // Read the backlog before subscribing, in one synchronous step, so no event is lost or doubled.
  const backlog: { type: string; object: unknown }[] =
    fromRv === null
      ? deps.store.list(type, namespace, match).map((object) => ({ type: "ADDED", object }))
      : deps.store
          .since(fromRv)
          .filter(relevant)
          .map((e) => ({ type: e.type, object: e.object }));
  const timeoutSeconds = Number(c.req.query("timeoutSeconds") ?? "1800");
  const table = wantsTable(c);
  const encoder = new TextEncoder();
  let unsubscribe = () => {};
  const stop = new AbortController();
  const stream = new ReadableStream<Uint8Array>({
    start(controller) {
      const send = (event: { type: string; object: unknown }) => {
        // Asked for as=Table (kubectl get --watch), each event carries a one-row Table, as the apiserver sends.
        const object = table ? tableOf(type, [event.object as KObject], deps.store.resourceVersion) : event.object;
        try {
          controller.enqueue(encoder.encode(`${JSON.stringify({ type: event.type, object })}\n`));
        } catch {
          close();
        }
      };
      const close = () => {
        if (stop.signal.aborted) return;
        stop.abort();
        unsubscribe();
        try {
          controller.close();
        } catch {
          // already closed by the client
        }
      };
      for (const event of backlog) send(event);
      unsubscribe = deps.store.subscribe((e) => {
        if (relevant(e)) send({ type: e.type, object: e.object });
      });
      c.req.raw.signal.addEventListener("abort", close, { once: true });
      deps.scheduler.sleep(Math.max(1, timeoutSeconds) * 1000, stop.signal).then(close, () => {});
    },
    cancel() {
      stop.abort();
      unsubscribe();
    },
  });
  return new Response(stream, { status: 200, headers: { "content-type": "application/json", "transfer-encoding": "chunked" } });
}

function applyPatch(contentType: string, body: unknown): (current: KObject) => KObject {
  if (contentType.startsWith("application/merge-patch+json") || contentType.startsWith("application/strategic-merge-patch+json")) {
    return (current) => mergePatch(current, body) as KObject;
  }
  if (contentType.startsWith("application/json-patch+json")) {
    if (!Array.isArray(body)) throw badRequest("a JSON patch must be an array of operations");
    return (current) => jsonPatch(current, body);
  }
  throw new StatusError(
    415,
    "UnsupportedMediaType",
    `the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json`,
  );
}

/** RFC 7386. */
export function mergePatch(target: unknown, patch: unknown): unknown {
  if (patch === null || typeof patch !== "object" || Array.isArray(patch)) return patch;
  const out: Record<string, unknown> =
    target !== null && typeof target === "object" && !Array.isArray(target) ? { ...(target as Record<string, unknown>) } : {};
  for (const [key, value] of Object.entries(patch)) {
    if (value === null) delete out[key];
    else out[key] = mergePatch(out[key], value);
  }
  return out;
}

/** RFC 6902 (add, remove, replace, test). */
export function jsonPatch(doc: KObject, ops: unknown[]): KObject {
  const root = { "": doc } as Record<string, unknown>;
  for (const raw of ops) {
    const op = raw as { op?: string; path?: string; value?: unknown };
    if (typeof op.path !== "string" || !["add", "remove", "replace", "test"].includes(op.op ?? ""))
      throw badRequest(`unsupported JSON patch operation ${JSON.stringify(raw)}`);
    const parts = [
      "",
      ...op.path
        .split("/")
        .slice(1)
        .map((p) => p.replaceAll("~1", "/").replaceAll("~0", "~")),
    ];
    const last = parts.pop() as string;
    let parent: unknown = root;
    for (const part of parts) {
      parent = (parent as Record<string, unknown>)?.[part];
      if (parent === null || typeof parent !== "object") throw new StatusError(422, "Invalid", `the path ${op.path} does not exist`);
    }
    const container = parent as Record<string, unknown> | unknown[];
    if (op.op === "test") {
      if (JSON.stringify((container as Record<string, unknown>)[last]) !== JSON.stringify(op.value))
        throw new StatusError(422, "Invalid", `test failed at ${op.path}`);
    } else if (Array.isArray(container)) {
      const index = last === "-" ? container.length : Number(last);
      if (op.op === "add") container.splice(index, 0, op.value);
      else if (op.op === "remove") container.splice(index, 1);
      else container[index] = op.value;
    } else if (op.op === "remove") {
      if (!(last in container)) throw new StatusError(422, "Invalid", `the path ${op.path} does not exist`);
      delete container[last];
    } else container[last] = op.value;
  }
  return root[""] as KObject;
}

function mountObjects(app: Hono, deps: ApiDeps, prefix: string): void {
  const { store } = deps;
  const collection = `${prefix}/namespaces/:namespace/:plural`;
  app.get(collection, (c) => listOrWatch(c, deps, c.req.param("namespace")));
  app.get(`${prefix}/:plural`, (c) => listOrWatch(c, deps, undefined));
  app.post(collection, async (c) => {
    const type = resourceOf(deps, c);
    if (type.validate === null) throw new StatusError(405, "MethodNotAllowed", "pods are created by the emulated controllers only");
    return c.json(store.create(type, c.req.param("namespace") as string, await readJson(c)), 201);
  });
  for (const sub of ["", "/status"]) {
    const path = `${collection}/:name${sub}`;
    const subresource = sub === "" ? null : "status";
    app.get(path, (c) => c.json(store.get(resourceOf(deps, c), c.req.param("namespace") as string, c.req.param("name") as string)));
    app.put(path, async (c) => {
      const type = resourceOf(deps, c);
      if (type.validate === null) throw new StatusError(405, "MethodNotAllowed", "pods are updated by the emulated controllers only");
      return c.json(store.replace(type, c.req.param("namespace") as string, c.req.param("name") as string, await readJson(c), subresource));
    });
    app.patch(path, async (c) => {
      const type = resourceOf(deps, c);
      const apply = applyPatch(c.req.header("content-type") ?? "", await readJson(c));
      return c.json(store.patch(type, c.req.param("namespace") as string, c.req.param("name") as string, apply, subresource));
    });
  }
  app.delete(`${collection}/:name`, async (c) => {
    const text = await c.req.text();
    let options: { propagationPolicy?: string; preconditions?: { uid?: string } } = {};
    // DeleteOptions may come as a body (client-node) or as query parameters (kubectl).
    if (text.trim() !== "") options = JSON.parse(text) as typeof options;
    const gone = store.delete(resourceOf(deps, c), c.req.param("namespace") as string, c.req.param("name") as string, {
      propagationPolicy: c.req.query("propagationPolicy") ?? options.propagationPolicy,
      preconditionsUid: options.preconditions?.uid,
    });
    return c.json(gone);
  });
}

function listOrWatch(c: Ctx, deps: ApiDeps, namespace: string | undefined): Response {
  const type = resourceOf(deps, c);
  const watch = c.req.query("watch");
  if (watch === "true" || watch === "1") return watchStream(c, deps, type, namespace);
  const match = selector(c.req.query("labelSelector"), c.req.query("fieldSelector"));
  const items = deps.store.list(type, namespace, match);
  if (wantsTable(c)) return c.json(tableOf(type, items, deps.store.resourceVersion));
  return c.json(listOf(type, items, deps.store.resourceVersion));
}

/** Mounts the whole REST surface (behind the bearer token) on `app`. */
export function mountApi(app: Hono, deps: ApiDeps): void {
  app.onError((err, c) => {
    if (err instanceof StatusError) return statusResponse(c, err);
    if (err instanceof SyntaxError) return statusResponse(c, badRequest(err.message));
    return statusResponse(c, new StatusError(500, "InternalError", err instanceof Error ? err.message : String(err)));
  });
  app.notFound((c) => statusResponse(c, new StatusError(404, "NotFound", "the server could not find the requested resource")));
  app.use("*", async (c, next) => {
    if (c.req.path.startsWith("/_standin/")) return next();
    if (c.req.header("authorization") !== `Bearer ${deps.token}`) {
      return statusResponse(c, new StatusError(401, "Unauthorized", "Unauthorized"));
    }
    return next();
  });
  mountDiscovery(app, deps);
  mountObjects(app, deps, "/api/:version{v1}");
  mountObjects(app, deps, "/apis/:group/:version");
}
