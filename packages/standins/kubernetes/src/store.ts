/**
 * The apiserver's object store: one global, monotonic resourceVersion;
 * optimistic concurrency on writes that carry one; generation bumped on
 * spec changes; status kept apart behind the `/status` subresource;
 * finalizers and `deletionTimestamp`; garbage collection along
 * ownerReferences (claim → Sandbox → Pod); and a bounded event history so a
 * watch can resume from a resourceVersion, or learn with 410 Gone that it
 * is too old.
 */
import { randomUUID } from "node:crypto";
import type { ResourceType } from "./resources.ts";
import type { Matcher } from "./selectors.ts";
import { alreadyExists, conflict, invalid, notFound, StatusError } from "./status.ts";

export interface OwnerReference {
  apiVersion: string;
  kind: string;
  name: string;
  uid: string;
  controller?: boolean;
  blockOwnerDeletion?: boolean;
}

export interface ObjectMeta {
  name: string;
  namespace: string;
  uid: string;
  resourceVersion: string;
  generation: number;
  creationTimestamp: string;
  labels?: Record<string, string>;
  annotations?: Record<string, string>;
  ownerReferences?: OwnerReference[];
  finalizers?: string[];
  deletionTimestamp?: string;
  generateName?: string;
}

export interface KObject {
  apiVersion: string;
  kind: string;
  metadata: ObjectMeta;
  spec?: unknown;
  status?: unknown;
  [field: string]: unknown;
}

export type EventType = "ADDED" | "MODIFIED" | "DELETED";

export interface StoreEvent {
  type: EventType;
  resource: ResourceType;
  object: KObject;
  rv: number;
}

const HISTORY = 2000;
const DNS_SUBDOMAIN = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;
const LABEL_VALUE = /^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$/;
const LABEL_KEY = /^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*\/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$/;

const clone = <T>(value: T): T => structuredClone(value);
const keyOf = (t: ResourceType, namespace: string, name: string) => `${t.group}/${t.plural}/${namespace}/${name}`;

export type Listener = (event: StoreEvent) => void;

export class ObjectStore {
  #rv = 0;
  readonly #objects = new Map<string, { resource: ResourceType; object: KObject }>();
  readonly #history: StoreEvent[] = [];
  readonly #listeners = new Set<Listener>();
  #now: () => Date;

  constructor(now: () => Date = () => new Date()) {
    this.#now = now;
  }

  get resourceVersion(): string {
    return String(this.#rv);
  }

  /** Every change, as it happens (watch streams and the emulated controller). */
  subscribe(listener: Listener): () => void {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }

  #emit(type: EventType, resource: ResourceType, object: KObject): void {
    const event: StoreEvent = { type, resource, object: clone(object), rv: Number(object.metadata.resourceVersion) };
    this.#history.push(event);
    if (this.#history.length > HISTORY) this.#history.shift();
    for (const listener of [...this.#listeners]) listener(event);
  }

  /** Events after `rv` for a resumed watch; throws 410 when the history no longer reaches back that far. */
  since(rv: number): StoreEvent[] {
    const oldest = this.#history[0];
    if (rv < this.#rv && oldest !== undefined && oldest.rv > rv + 1) {
      throw new StatusError(410, "Expired", `too old resource version: ${rv} (${oldest.rv - 1})`);
    }
    return this.#history.filter((e) => e.rv > rv).map((e) => ({ ...e, object: clone(e.object) }));
  }

  get(t: ResourceType, namespace: string, name: string): KObject {
    const held = this.#objects.get(keyOf(t, namespace, name));
    if (!held) throw notFound(t.group, t.plural, name);
    return clone(held.object);
  }

  list(t: ResourceType, namespace: string | undefined, match: Matcher): KObject[] {
    const out: KObject[] = [];
    for (const { resource, object } of this.#objects.values()) {
      if (resource !== t) continue;
      if (namespace !== undefined && object.metadata.namespace !== namespace) continue;
      if (!match({ labels: object.metadata.labels ?? {}, name: object.metadata.name, namespace: object.metadata.namespace })) continue;
      out.push(clone(object));
    }
    return out.sort((a, b) => a.metadata.name.localeCompare(b.metadata.name));
  }

  #validate(t: ResourceType, object: KObject): void {
    const name = object.metadata.name;
    const causes: { field: string; message: string }[] = [];
    if (!DNS_SUBDOMAIN.test(name) || name.length > 253)
      causes.push({
        field: "metadata.name",
        message: `metadata.name: Invalid value: ${JSON.stringify(name)}: a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character`,
      });
    for (const [k, v] of Object.entries(object.metadata.labels ?? {})) {
      if (typeof v !== "string" || !LABEL_KEY.test(k) || !LABEL_VALUE.test(v) || v.length > 63)
        causes.push({ field: `metadata.labels`, message: `metadata.labels: Invalid value: ${JSON.stringify(`${k}=${v}`)}` });
    }
    if (t.validate) for (const message of t.validate(object)) causes.push({ field: message.split(":")[0] as string, message });
    if (causes.length > 0) throw invalid(t.group, t.kind, name, causes);
  }

  #stamp(object: KObject): void {
    this.#rv += 1;
    object.metadata.resourceVersion = String(this.#rv);
  }

  create(t: ResourceType, namespace: string, input: unknown): KObject {
    const object = clone(input) as KObject;
    if (object === null || typeof object !== "object" || typeof object.metadata !== "object" || object.metadata === null) {
      throw invalid(t.group, t.kind, "", [{ field: "metadata", message: "metadata: Required value" }]);
    }
    const meta = object.metadata;
    if (!meta.name && meta.generateName) meta.name = `${meta.generateName}${randomUUID().slice(0, 5)}`;
    if (!meta.name)
      throw invalid(t.group, t.kind, "", [
        { field: "metadata.name", message: "metadata.name: Required value: name or generateName is required" },
      ]);
    if (meta.namespace !== undefined && meta.namespace !== namespace) {
      throw new StatusError(400, "BadRequest", "the namespace of the provided object does not match the namespace sent on the request");
    }
    object.apiVersion = t.apiVersion;
    object.kind = t.kind;
    const key = keyOf(t, namespace, meta.name);
    if (this.#objects.has(key)) throw alreadyExists(t.group, t.plural, meta.name);
    object.metadata = {
      ...meta,
      namespace,
      uid: randomUUID(),
      generation: 1,
      creationTimestamp: this.#timestamp(),
      resourceVersion: "",
    };
    delete object.metadata.deletionTimestamp;
    // A client cannot create status through the main resource when a status subresource exists.
    if (t.hasStatus && t.validate !== null) delete object.status;
    this.#validate(t, object);
    this.#stamp(object);
    this.#objects.set(key, { resource: t, object });
    this.#emit("ADDED", t, object);
    return clone(object);
  }

  /** PUT: the whole object (or its status) replaced, compare-and-swap on resourceVersion when the body carries one. */
  replace(t: ResourceType, namespace: string, name: string, input: unknown, subresource: "status" | null): KObject {
    const held = this.#objects.get(keyOf(t, namespace, name));
    if (!held) throw notFound(t.group, t.plural, name);
    const body = clone(input) as KObject;
    if (body === null || typeof body !== "object" || typeof body.metadata !== "object" || body.metadata === null) {
      throw invalid(t.group, t.kind, name, [{ field: "metadata", message: "metadata: Required value" }]);
    }
    if (body.metadata.name !== undefined && body.metadata.name !== name) {
      throw new StatusError(
        400,
        "BadRequest",
        `the name of the object (${body.metadata.name}) does not match the name on the URL (${name})`,
      );
    }
    const current = held.object;
    if (body.metadata.resourceVersion && body.metadata.resourceVersion !== current.metadata.resourceVersion) {
      throw conflict(t.group, t.plural, name);
    }
    return this.#write(t, held, this.#merged(t, current, body, subresource));
  }

  /** The object a write produces: the apiserver owns identity fields; the status subresource splits spec from status. */
  #merged(t: ResourceType, current: KObject, body: KObject, subresource: "status" | null): KObject {
    const identity = {
      name: current.metadata.name,
      namespace: current.metadata.namespace,
      uid: current.metadata.uid,
      creationTimestamp: current.metadata.creationTimestamp,
      generation: current.metadata.generation,
      resourceVersion: current.metadata.resourceVersion,
      ...(current.metadata.deletionTimestamp ? { deletionTimestamp: current.metadata.deletionTimestamp } : {}),
    };
    if (subresource === "status") return { ...clone(current), status: body.status };
    const next: KObject = { ...body, apiVersion: t.apiVersion, kind: t.kind, metadata: { ...body.metadata, ...identity } };
    if (t.hasStatus) {
      if (current.status === undefined) delete next.status;
      else next.status = clone(current.status);
    }
    if (JSON.stringify(next.spec) !== JSON.stringify(current.spec)) next.metadata.generation = current.metadata.generation + 1;
    return next;
  }

  #write(t: ResourceType, held: { object: KObject }, next: KObject): KObject {
    this.#validate(t, next);
    if (JSON.stringify(next) === JSON.stringify(held.object)) return clone(held.object);
    this.#stamp(next);
    held.object = next;
    if (next.metadata.deletionTimestamp && (next.metadata.finalizers ?? []).length === 0) {
      this.#remove(t, next);
      return clone(next);
    }
    this.#emit("MODIFIED", t, next);
    return clone(next);
  }

  /** PATCH with an already computed patched document (the HTTP layer applies merge or JSON patch to a copy). */
  patch(t: ResourceType, namespace: string, name: string, apply: (current: KObject) => KObject, subresource: "status" | null): KObject {
    const held = this.#objects.get(keyOf(t, namespace, name));
    if (!held) throw notFound(t.group, t.plural, name);
    const patched = apply(clone(held.object));
    if (patched.metadata?.resourceVersion && patched.metadata.resourceVersion !== held.object.metadata.resourceVersion) {
      throw conflict(t.group, t.plural, name);
    }
    return this.#write(t, held, this.#merged(t, held.object, patched, subresource));
  }

  /**
   * DELETE: with finalizers the object only gets a deletionTimestamp; otherwise it goes, and so (unless
   * `Orphan`) do the objects it owns, in the background.
   */
  delete(
    t: ResourceType,
    namespace: string,
    name: string,
    options: { propagationPolicy?: string; preconditionsUid?: string } = {},
  ): KObject {
    const held = this.#objects.get(keyOf(t, namespace, name));
    if (!held) throw notFound(t.group, t.plural, name);
    const current = held.object;
    if (options.preconditionsUid && options.preconditionsUid !== current.metadata.uid) {
      throw new StatusError(
        409,
        "Conflict",
        `Precondition failed: UID in precondition: ${options.preconditionsUid}, UID in object meta: ${current.metadata.uid}`,
      );
    }
    if ((current.metadata.finalizers ?? []).length > 0) {
      if (current.metadata.deletionTimestamp) return clone(current);
      const next = clone(current);
      next.metadata.deletionTimestamp = this.#timestamp();
      this.#stamp(next);
      held.object = next;
      this.#emit("MODIFIED", t, next);
      return clone(next);
    }
    this.#remove(t, current, options.propagationPolicy === "Orphan");
    return clone(current);
  }

  #remove(t: ResourceType, object: KObject, orphan = false): void {
    this.#objects.delete(keyOf(t, object.metadata.namespace, object.metadata.name));
    const gone = clone(object);
    this.#stamp(gone);
    this.#emit("DELETED", t, gone);
    for (const dependent of [...this.#objects.values()]) {
      const refs = dependent.object.metadata.ownerReferences ?? [];
      if (!refs.some((r) => r.uid === object.metadata.uid)) continue;
      const meta = dependent.object.metadata;
      if (orphan || refs.length > 1) {
        this.patch(
          dependent.resource,
          meta.namespace,
          meta.name,
          (o) => {
            o.metadata.ownerReferences = refs.filter((r) => r.uid !== object.metadata.uid);
            return o;
          },
          null,
        );
      } else if (this.#objects.has(keyOf(dependent.resource, meta.namespace, meta.name))) {
        this.delete(dependent.resource, meta.namespace, meta.name);
      }
    }
  }

  #timestamp(): string {
    return this.#now()
      .toISOString()
      .replace(/\.\d{3}Z$/, "Z");
  }
}
