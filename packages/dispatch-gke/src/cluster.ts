/**
 * The cluster side of GKE dispatch, through the official
 * `@kubernetes/client-node`: SandboxClaims (extensions.agents.x-k8s.io
 * v1beta1) listed by label, created get-or-create by name, annotated and
 * deleted; a claim awaited on a watch until its Sandbox is bound and Ready;
 * the bound pod found through the Sandbox's `agents.x-k8s.io/pod-name`
 * annotation; and commands run in the pod over pods/exec with stdin.
 * Kubeconfig is loaded the usual way (`KUBECONFIG`, then `~/.kube/config`,
 * then in-cluster) unless a loaded one is passed.
 */
import { PassThrough, Writable } from "node:stream";
import {
  ApiException,
  CoreV1Api,
  CustomObjectsApi,
  Exec,
  KubeConfig,
  PatchStrategy,
  setHeaderOptions,
  type V1Status,
  Watch,
} from "@kubernetes/client-node";

export const CLAIM_GROUP = "extensions.agents.x-k8s.io";
export const CLAIM_VERSION = "v1beta1";
export const CLAIM_PLURAL = "sandboxclaims";
export const SANDBOX_GROUP = "agents.x-k8s.io";
export const SANDBOX_VERSION = "v1beta1";
export const POD_NAME_ANNOTATION = "agents.x-k8s.io/pod-name";

export interface SandboxClaim {
  metadata: { name: string; uid?: string; labels?: Record<string, string>; annotations?: Record<string, string>; resourceVersion?: string };
  spec?: { warmPoolRef?: { name: string } };
  status?: {
    sandbox?: { name?: string; podIPs?: string[] };
    conditions?: { type: string; status: string; reason?: string; message?: string }[];
  };
}

export interface ExecResult {
  exitCode: number;
  stdout: string;
  stderr: string;
}

/** What the dispatcher needs from the cluster; `KubeCluster` is the real one, tests may wrap it to inject faults. */
export interface ClusterPort {
  listClaims(labelSelector: string): Promise<SandboxClaim[]>;
  /** Get-or-create by name: a claim that already exists (AlreadyExists) is returned with `created: false`. */
  createClaim(claim: SandboxClaim): Promise<{ claim: SandboxClaim; created: boolean }>;
  /** Deleting a claim that is already gone is not an error. */
  deleteClaim(name: string): Promise<void>;
  annotateClaim(name: string, annotations: Record<string, string>): Promise<void>;
  /** Resolves with the bound pod's name once the claim is Ready; rejects on a terminal reason or abort. */
  waitForPod(name: string, signal: AbortSignal): Promise<string>;
  exec(pod: string, command: string[], stdin: Uint8Array | null): Promise<ExecResult>;
}

const TERMINAL = new Set(["WarmPoolNotFound", "TemplateNotFound", "ClaimExpired", "SandboxMissing", "AdoptionConflict"]);

function statusCode(err: unknown): number | undefined {
  if (err instanceof ApiException) return err.code;
  return undefined;
}

export class KubeCluster implements ClusterPort {
  readonly #kc: KubeConfig;
  readonly #namespace: string;
  readonly #custom: CustomObjectsApi;
  readonly #core: CoreV1Api;

  constructor(options: { namespace: string; kubeConfig?: KubeConfig }) {
    this.#kc = options.kubeConfig ?? defaultKubeConfig();
    this.#namespace = options.namespace;
    this.#custom = this.#kc.makeApiClient(CustomObjectsApi);
    this.#core = this.#kc.makeApiClient(CoreV1Api);
  }

  #claimPath<T extends object>(extra: T) {
    return { group: CLAIM_GROUP, version: CLAIM_VERSION, namespace: this.#namespace, plural: CLAIM_PLURAL, ...extra };
  }

  async listClaims(labelSelector: string): Promise<SandboxClaim[]> {
    const list = (await this.#custom.listNamespacedCustomObject(this.#claimPath({ labelSelector }))) as { items: SandboxClaim[] };
    return list.items;
  }

  async createClaim(claim: SandboxClaim): Promise<{ claim: SandboxClaim; created: boolean }> {
    try {
      const created = (await this.#custom.createNamespacedCustomObject(this.#claimPath({ body: claim }))) as SandboxClaim;
      return { claim: created, created: true };
    } catch (err) {
      if (statusCode(err) !== 409) throw err;
      const existing = (await this.#custom.getNamespacedCustomObject(this.#claimPath({ name: claim.metadata.name }))) as SandboxClaim;
      return { claim: existing, created: false };
    }
  }

  async deleteClaim(name: string): Promise<void> {
    try {
      await this.#custom.deleteNamespacedCustomObject(this.#claimPath({ name, propagationPolicy: "Background" }));
    } catch (err) {
      if (statusCode(err) !== 404) throw err;
    }
  }

  async annotateClaim(name: string, annotations: Record<string, string>): Promise<void> {
    await this.#custom.patchNamespacedCustomObject(
      this.#claimPath({ name, body: { metadata: { annotations } } }),
      setHeaderOptions("Content-Type", PatchStrategy.MergePatch),
    );
  }

  async waitForPod(name: string, signal: AbortSignal): Promise<string> {
    const sandboxName = await new Promise<string>((resolve, reject) => {
      let settled = false;
      let abortWatch: AbortController | null = null;
      const finish = (fn: () => void) => {
        if (settled) return;
        settled = true;
        signal.removeEventListener("abort", onAbort);
        abortWatch?.abort();
        fn();
      };
      const onAbort = () => finish(() => reject(signal.reason instanceof Error ? signal.reason : new Error("aborted")));
      signal.addEventListener("abort", onAbort, { once: true });
      const path = `/apis/${CLAIM_GROUP}/${CLAIM_VERSION}/namespaces/${this.#namespace}/${CLAIM_PLURAL}`;
      new Watch(this.#kc)
        .watch(
          path,
          { fieldSelector: `metadata.name=${name}` },
          (type, object: SandboxClaim) => {
            if (type === "DELETED")
              return finish(() => reject(new Error(`SandboxClaim ${name} was deleted while waiting for its sandbox`)));
            const ready = object.status?.conditions?.find((c) => c.type === "Ready");
            const bound = object.status?.sandbox?.name;
            if (ready?.status === "True" && bound) return finish(() => resolve(bound));
            if (ready?.reason && TERMINAL.has(ready.reason))
              finish(() => reject(new Error(`SandboxClaim ${name}: ${ready.reason}: ${ready.message ?? ""}`)));
          },
          (err: unknown) => finish(() => reject(err instanceof Error ? err : new Error(`the watch of SandboxClaim ${name} ended`))),
        )
        .then(
          (controller) => {
            abortWatch = controller;
            if (settled) controller.abort();
          },
          (err: unknown) => finish(() => reject(err)),
        );
      if (signal.aborted) onAbort();
    });
    const sandbox = (await this.#custom.getNamespacedCustomObject({
      group: SANDBOX_GROUP,
      version: SANDBOX_VERSION,
      namespace: this.#namespace,
      plural: "sandboxes",
      name: sandboxName,
    })) as { metadata: { annotations?: Record<string, string> } };
    const pod = sandbox.metadata.annotations?.[POD_NAME_ANNOTATION] ?? sandboxName;
    await this.#core.readNamespacedPod({ name: pod, namespace: this.#namespace });
    return pod;
  }

  async exec(pod: string, command: string[], stdin: Uint8Array | null): Promise<ExecResult> {
    const out: Buffer[] = [];
    const errOut: Buffer[] = [];
    const sink = (into: Buffer[]) =>
      new Writable({
        write(chunk: Buffer, _encoding, done) {
          into.push(chunk);
          done();
        },
      });
    const input = stdin === null ? null : new PassThrough();
    return new Promise<ExecResult>((resolve, reject) => {
      let status: V1Status | null = null;
      new Exec(this.#kc)
        .exec(this.#namespace, pod, "", command, sink(out), sink(errOut), input, false, (s) => {
          status = s;
        })
        .then((socket) => {
          socket.on("close", () => {
            if (status === null) return reject(new Error(`exec in pod ${pod} ended without a status`));
            const exitCause = status.details?.causes?.find((c) => c.reason === "ExitCode");
            resolve({
              exitCode: status.status === "Success" ? 0 : Number(exitCause?.message ?? 1),
              stdout: Buffer.concat(out).toString("utf8"),
              stderr: Buffer.concat(errOut).toString("utf8"),
            });
          });
          socket.on("error", reject);
          if (input !== null) input.end(Buffer.from(stdin as Uint8Array));
        }, reject);
    });
  }
}

/** KUBECONFIG, then ~/.kube/config, then the in-cluster service account: client-node's usual order. */
export function defaultKubeConfig(): KubeConfig {
  const kc = new KubeConfig();
  kc.loadFromDefault();
  return kc;
}
