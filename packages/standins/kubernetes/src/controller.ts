/**
 * An emulated agent-sandbox controller, acting on the store as the real one
 * acts through the apiserver (upstream `sandboxwarmpool_controller.go`,
 * `sandboxclaim_controller.go`, `sandbox_controller.go`):
 *
 * - a SandboxWarmPool keeps `spec.replicas` Sandboxes from its template,
 *   labelled `agents.x-k8s.io/warm-pool-sandbox=<pool hash>` and owned by
 *   the pool, and reports `replicas` / `readyReplicas` / `selector`;
 * - each Sandbox gets one Pod of the same name, owned by it, whose container
 *   is a real local sandbox started right away (so a warm pod is really
 *   pre-started); the Pod turns Running with a loopback IP and the Sandbox
 *   Ready (`DependenciesReady`) once the container runs;
 * - a SandboxClaim adopts a Ready warm Sandbox: warm labels removed,
 *   `agents.x-k8s.io/claim-uid` and `launch-type=warm` added, the owner
 *   reference replaced by a controller reference to the claim, the
 *   `agents.x-k8s.io/pod-name` annotation set; the claim records
 *   `agents.x-k8s.io/sandbox-name` and gets `status.sandbox` and the
 *   forwarded Ready condition; the pool then replenishes;
 * - deleting a claim deletes its Sandbox and Pod (garbage collection along
 *   owner references), and a deleted Pod's container is destroyed.
 *
 * Not emulated: claims that force a cold start (`env`,
 * `volumeClaimTemplates`), `lifecycle` expiry, Services and NetworkPolicies.
 */
import { createHash } from "node:crypto";
import type { Box, LocalBoxes } from "@openma/standin-kit";
import { POD, type ResourceType, type ResourceTypes } from "./resources.ts";
import { selector } from "./selectors.ts";
import type { KObject, ObjectStore, OwnerReference } from "./store.ts";

export const WARM_POOL_LABEL = "agents.x-k8s.io/warm-pool-sandbox";
export const TEMPLATE_HASH_LABEL = "agents.x-k8s.io/sandbox-template-ref-hash";
export const CLAIM_UID_LABEL = "agents.x-k8s.io/claim-uid";
export const LAUNCH_TYPE_LABEL = "agents.x-k8s.io/launch-type";
export const SANDBOX_NAME_ANNOTATION = "agents.x-k8s.io/sandbox-name";
export const POD_NAME_ANNOTATION = "agents.x-k8s.io/pod-name";

const hash = (text: string) => createHash("sha256").update(text).digest("hex").slice(0, 10);
const everything = selector(undefined, undefined);

interface Condition {
  type: string;
  status: "True" | "False";
  reason: string;
  message: string;
  lastTransitionTime: string;
  observedGeneration?: number;
}

function condition(type: string, ready: boolean, reason: string, message: string): Condition {
  return {
    type,
    status: ready ? "True" : "False",
    reason,
    message,
    lastTransitionTime: new Date().toISOString().replace(/\.\d{3}Z$/, "Z"),
  };
}

function controllerRef(owner: KObject): OwnerReference {
  return {
    apiVersion: owner.apiVersion,
    kind: owner.kind,
    name: owner.metadata.name,
    uid: owner.metadata.uid,
    controller: true,
    blockOwnerDeletion: true,
  };
}

/** Status equality that ignores transition times (a pass that changes nothing must write nothing, or passes never end). */
const sameStatus = (a: unknown, b: unknown) => {
  const strip = (key: string, value: unknown) => (key === "lastTransitionTime" ? undefined : value);
  return JSON.stringify(a, strip) === JSON.stringify(b, strip);
};

const isReady = (sandbox: KObject) =>
  ((sandbox.status as { conditions?: Condition[] } | undefined)?.conditions ?? []).some((c) => c.type === "Ready" && c.status === "True");

export class SandboxController {
  readonly #store: ObjectStore;
  readonly #boxes: LocalBoxes;
  readonly #pool: ResourceType;
  readonly #claim: ResourceType;
  readonly #template: ResourceType;
  readonly #sandbox: ResourceType;
  /** Containers by pod uid; `null` while one is starting. */
  readonly #running = new Map<string, Box | null>();
  #nextIp = 1;
  #busy = false;
  #dirty = false;
  #closed = false;
  #unsubscribe: () => void;
  #idle: Promise<void> = Promise.resolve();
  readonly #pending = new Set<Promise<unknown>>();

  constructor(store: ObjectStore, types: ResourceTypes, boxes: LocalBoxes) {
    this.#store = store;
    this.#boxes = boxes;
    this.#pool = types.byKind("SandboxWarmPool");
    this.#claim = types.byKind("SandboxClaim");
    this.#template = types.byKind("SandboxTemplate");
    this.#sandbox = types.byKind("Sandbox");
    this.#unsubscribe = store.subscribe((event) => {
      if (event.resource === POD && event.type === "DELETED") this.#destroy(event.object.metadata.uid);
      this.kick();
    });
  }

  boxOf(podUid: string): Box | undefined {
    return this.#running.get(podUid) ?? undefined;
  }

  /** Containers started for pods that still exist or are being started. */
  get containers(): number {
    return this.#running.size;
  }

  /**
   * Schedules a reconcile pass (coalesced while one runs). Deferred to a microtask so that a watch sees the event
   * that triggered the pass before the events the pass causes.
   */
  kick(): void {
    if (this.#closed) return;
    this.#dirty = true;
    if (this.#busy) return;
    this.#busy = true;
    this.#idle = Promise.resolve().then(() => {
      try {
        while (this.#dirty && !this.#closed) {
          this.#dirty = false;
          this.#reconcile();
        }
      } finally {
        this.#busy = false;
      }
    });
  }

  /** Resolves once no reconcile pass runs and no container is starting or stopping (tests and shutdown). */
  async settled(): Promise<void> {
    while (this.#busy || this.#pending.size > 0) {
      await this.#idle;
      await Promise.allSettled([...this.#pending]);
    }
  }

  async close(): Promise<void> {
    this.#closed = true;
    this.#unsubscribe();
    await Promise.allSettled([...this.#pending]);
  }

  #track(work: Promise<unknown>): void {
    this.#pending.add(work);
    void work.finally(() => this.#pending.delete(work));
  }

  #reconcile(): void {
    for (const pool of this.#store.list(this.#pool, undefined, everything)) this.#reconcilePool(pool);
    for (const sandbox of this.#store.list(this.#sandbox, undefined, everything)) this.#reconcileSandbox(sandbox);
    for (const claim of this.#store.list(this.#claim, undefined, everything)) this.#reconcileClaim(claim);
  }

  #tryPatch(type: ResourceType, object: KObject, change: (o: KObject) => KObject, sub: "status" | null = null): KObject | null {
    try {
      return this.#store.patch(type, object.metadata.namespace, object.metadata.name, change, sub);
    } catch {
      // Gone or changed meanwhile: the event that did it schedules another pass.
      return null;
    }
  }

  #reconcilePool(pool: KObject): void {
    if (pool.metadata.deletionTimestamp) return;
    const ns = pool.metadata.namespace;
    const spec = pool.spec as { replicas?: number; sandboxTemplateRef: { name: string } };
    const poolHash = hash(`${ns}/${pool.metadata.name}`);
    const members = this.#store.list(this.#sandbox, ns, selector(`${WARM_POOL_LABEL}=${poolHash}`, undefined));
    const replicas = spec.replicas ?? 1;
    let template: KObject | null = null;
    try {
      template = this.#store.get(this.#template, ns, spec.sandboxTemplateRef.name);
    } catch {
      template = null;
    }
    if (template !== null && members.length < replicas) {
      for (let i = members.length; i < replicas; i++) {
        const created = this.#store.create(this.#sandbox, ns, {
          metadata: {
            generateName: `${pool.metadata.name}-`,
            labels: { [WARM_POOL_LABEL]: poolHash, [TEMPLATE_HASH_LABEL]: hash(`${ns}/${template.metadata.name}`) },
            annotations: { "agents.x-k8s.io/sandbox-template-ref": template.metadata.name },
            ownerReferences: [controllerRef(pool)],
          },
          spec: { podTemplate: (template.spec as { podTemplate: unknown }).podTemplate },
        });
        members.push(created);
      }
    }
    // Scale down the unready first.
    const surplus = [...members].sort((a, b) => Number(isReady(a)) - Number(isReady(b))).slice(0, Math.max(0, members.length - replicas));
    for (const extra of surplus) this.#store.delete(this.#sandbox, ns, extra.metadata.name);
    const kept = members.filter((m) => !surplus.includes(m));
    const status = {
      replicas: kept.length,
      readyReplicas: kept.filter(isReady).length,
      selector: `${WARM_POOL_LABEL}=${poolHash}`,
      observedGeneration: pool.metadata.generation,
    };
    if (JSON.stringify(pool.status) !== JSON.stringify(status)) this.#tryPatch(this.#pool, pool, (o) => ({ ...o, status }), "status");
  }

  #reconcileSandbox(sandbox: KObject): void {
    const ns = sandbox.metadata.namespace;
    const name = sandbox.metadata.name;
    let pod: KObject | null = null;
    try {
      pod = this.#store.get(POD, ns, name);
    } catch {
      pod = null;
    }
    if (pod === null) {
      if (sandbox.metadata.deletionTimestamp) return;
      const template =
        (sandbox.spec as { podTemplate?: { metadata?: { labels?: Record<string, string> }; spec?: unknown } }).podTemplate ?? {};
      pod = this.#store.create(POD, ns, {
        metadata: {
          name,
          labels: { ...(template.metadata?.labels ?? {}), "agents.x-k8s.io/sandbox-name-hash": hash(name) },
          ownerReferences: [controllerRef(sandbox)],
        },
        spec: template.spec ?? {},
        status: { phase: "Pending" },
      });
      this.#tryPatch(this.#sandbox, sandbox, (o) => {
        o.metadata.annotations = { ...(o.metadata.annotations ?? {}), [POD_NAME_ANNOTATION]: name };
        return o;
      });
      this.#start(pod);
      return;
    }
    const podStatus = pod.status as { phase?: string; podIP?: string };
    const ready = podStatus.phase === "Running";
    const status = {
      conditions: [
        condition(
          "Ready",
          ready,
          ready ? "DependenciesReady" : "DependenciesNotReady",
          ready ? "Pod is Ready" : `Pod is ${podStatus.phase}`,
        ),
      ],
      podIPs: podStatus.podIP ? [podStatus.podIP] : [],
      selector: `agents.x-k8s.io/sandbox-name-hash=${hash(name)}`,
    };
    const before = (sandbox.status as { conditions?: Condition[]; podIPs?: string[] } | undefined) ?? {};
    if (
      before.conditions?.[0]?.status !== status.conditions[0]?.status ||
      JSON.stringify(before.podIPs) !== JSON.stringify(status.podIPs)
    ) {
      this.#tryPatch(this.#sandbox, sandbox, (o) => ({ ...o, status }), "status");
    }
  }

  /** Starts the pod's container; the Pod turns Running (or Failed) when the engine answers. */
  #start(pod: KObject): void {
    const uid = pod.metadata.uid;
    this.#running.set(uid, null);
    const ip = `127.0.10.${this.#nextIp++}`;
    this.#track(
      this.#boxes.create("pod-").then(
        async (box) => {
          if (!this.#running.has(uid) || this.#closed) {
            // The pod went while its container started.
            await this.#boxes.destroy(box).catch(() => {});
            return;
          }
          this.#running.set(uid, box);
          this.#tryPatch(
            POD,
            pod,
            (o) => ({
              ...o,
              status: {
                phase: "Running",
                podIP: ip,
                podIPs: [{ ip }],
                hostIP: "127.0.0.1",
                conditions: [condition("Ready", true, "", "")],
                startTime: box.createdAt.toISOString(),
              },
            }),
            "status",
          );
        },
        (err: unknown) => {
          this.#running.delete(uid);
          this.#tryPatch(
            POD,
            pod,
            (o) => ({
              ...o,
              status: { phase: "Failed", reason: "ContainerCreateFailed", message: err instanceof Error ? err.message : String(err) },
            }),
            "status",
          );
        },
      ),
    );
  }

  #destroy(podUid: string): void {
    const box = this.#running.get(podUid);
    this.#running.delete(podUid);
    if (box) this.#track(this.#boxes.destroy(box).catch(() => {}));
  }

  #claimStatus(claim: KObject, status: object): void {
    if (sameStatus(claim.status, status)) return;
    this.#tryPatch(this.#claim, claim, (o) => ({ ...o, status }), "status");
  }

  #reconcileClaim(claim: KObject): void {
    if (claim.metadata.deletionTimestamp) return;
    const ns = claim.metadata.namespace;
    const bound = claim.metadata.annotations?.[SANDBOX_NAME_ANNOTATION];
    if (bound !== undefined) {
      let sandbox: KObject | null = null;
      try {
        sandbox = this.#store.get(this.#sandbox, ns, bound);
      } catch {
        sandbox = null;
      }
      if (sandbox === null) {
        this.#claimStatus(claim, { conditions: [condition("Ready", false, "SandboxMissing", `Sandbox ${bound} is gone`)] });
        return;
      }
      const ready = ((sandbox.status as { conditions?: Condition[] } | undefined)?.conditions ?? []).find((c) => c.type === "Ready");
      const podIPs = (sandbox.status as { podIPs?: string[] } | undefined)?.podIPs ?? [];
      const forwarded = ready ?? condition("Ready", false, "SandboxNotReady", "Sandbox is not ready");
      this.#claimStatus(claim, { conditions: [forwarded], sandbox: { name: bound, podIPs } });
      return;
    }
    const poolName = (claim.spec as { warmPoolRef: { name: string } }).warmPoolRef.name;
    let pool: KObject;
    try {
      pool = this.#store.get(this.#pool, ns, poolName);
    } catch {
      this.#claimStatus(claim, { conditions: [condition("Ready", false, "WarmPoolNotFound", `SandboxWarmPool ${poolName} not found`)] });
      return;
    }
    const poolHash = hash(`${ns}/${pool.metadata.name}`);
    const candidate = this.#store
      .list(this.#sandbox, ns, selector(`${WARM_POOL_LABEL}=${poolHash}`, undefined))
      .find((s) => isReady(s) && !s.metadata.deletionTimestamp && ((s.status as { podIPs?: string[] }).podIPs ?? []).length > 0);
    if (!candidate) {
      this.#claimStatus(claim, { conditions: [condition("Ready", false, "SandboxNotReady", "waiting for a ready warm sandbox")] });
      return;
    }
    // Record the adoption on the claim first, under optimistic locking, as upstream does.
    const recorded = this.#tryPatch(this.#claim, claim, (o) => {
      o.metadata.annotations = { ...(o.metadata.annotations ?? {}), [SANDBOX_NAME_ANNOTATION]: candidate.metadata.name };
      o.metadata.resourceVersion = claim.metadata.resourceVersion;
      return o;
    });
    if (recorded === null) return;
    const extra =
      (claim.spec as { additionalPodMetadata?: { labels?: Record<string, string>; annotations?: Record<string, string> } })
        .additionalPodMetadata ?? {};
    const adopt = (o: KObject) => {
      const labels: Record<string, string> = {
        ...(o.metadata.labels ?? {}),
        ...(extra.labels ?? {}),
        [CLAIM_UID_LABEL]: claim.metadata.uid,
        [LAUNCH_TYPE_LABEL]: "warm",
      };
      delete labels[WARM_POOL_LABEL];
      delete labels[TEMPLATE_HASH_LABEL];
      o.metadata.labels = labels;
      o.metadata.annotations = {
        ...(o.metadata.annotations ?? {}),
        ...(extra.annotations ?? {}),
        [POD_NAME_ANNOTATION]: candidate.metadata.name,
      };
      return o;
    };
    this.#tryPatch(this.#sandbox, candidate, (o) => {
      adopt(o);
      o.metadata.ownerReferences = [controllerRef(recorded)];
      return o;
    });
    try {
      this.#tryPatch(POD, this.#store.get(POD, ns, candidate.metadata.name), adopt);
    } catch {
      // the pod's own deletion reschedules
    }
  }
}
