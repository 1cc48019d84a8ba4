/**
 * The Kubernetes stand-in: an apiserver for the agent-sandbox CRDs and pods
 * (REST, watch, discovery, pods/exec) with the emulated agent-sandbox
 * controller behind it, on one local port. Point a client at it with the
 * kubeconfig it writes (`kubeconfigPath`, also `env.KUBECONFIG`): a bearer
 * token, and the certificate authority of the stand-in's own that signed
 * its serving certificate. It serves HTTPS because clients refuse plain
 * HTTP or quietly drop the token over it (kubectl does).
 */
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { SandboxCa } from "@openma/egress/ca";
import {
  type CloudStandIn,
  FaultQueue,
  Hangs,
  LocalBoxes,
  mountAdmin,
  type RecordedRequest,
  recorder,
  type StandInEnv,
  type StandInOptions,
  serveStandIn,
  standInHandle,
} from "@openma/standin-kit";
import { realScheduler, type Scheduler } from "@openma/time";
import { Hono } from "hono";
import { stringify } from "yaml";
import { mountApi } from "./api.ts";
import { SandboxController } from "./controller.ts";
import { execRoute } from "./exec.ts";
import { POD, ResourceTypes } from "./resources.ts";
import { selector } from "./selectors.ts";
import { ObjectStore } from "./store.ts";

export const DEFAULT_KUBE_TOKEN = "standin-kube-token-0123456789abcdef";

export interface KubernetesStandInOptions extends StandInOptions {
  /** Paces watch timeouts (`timeoutSeconds`). */
  scheduler?: Scheduler;
  /** Where the kubeconfig goes (default: a fresh temporary directory, removed at close). */
  kubeconfigPath?: string;
  /** The kubeconfig's default namespace (default `default`). */
  namespace?: string;
}

export interface KubernetesStandIn extends CloudStandIn {
  readonly store: ObjectStore;
  readonly types: ResourceTypes;
  readonly controller: SandboxController;
  readonly kubeconfigPath: string;
  readonly token: string;
}

/** A kubeconfig naming the stand-in: cluster (URL and CA), user (bearer token) and a current context. */
export function kubeconfigFor(url: string, caPem: string, token: string, namespace = "default"): string {
  return stringify({
    apiVersion: "v1",
    kind: "Config",
    clusters: [{ name: "openma-standin", cluster: { server: url, "certificate-authority-data": Buffer.from(caPem).toString("base64") } }],
    users: [{ name: "openma-standin", user: { token } }],
    contexts: [{ name: "openma-standin", context: { cluster: "openma-standin", user: "openma-standin", namespace } }],
    "current-context": "openma-standin",
  });
}

export async function startKubernetesStandIn(options: KubernetesStandInOptions = {}): Promise<KubernetesStandIn> {
  const token = options.apiKey ?? DEFAULT_KUBE_TOKEN;
  const faults = new FaultQueue();
  const hangs = new Hangs();
  const requests: RecordedRequest[] = [];
  const boxes = new LocalBoxes({ vendor: "kubernetes", image: options.image, networkMode: options.networkMode });
  const store = new ObjectStore();
  const types = new ResourceTypes();
  const controller = new SandboxController(store, types, boxes);
  const app = new Hono<StandInEnv>();
  app.use("*", recorder(requests));
  mountAdmin(app, {
    token,
    faults,
    state: async () => ({
      pods: store.list(POD, undefined, selector(undefined, undefined)).map((p) => p.metadata.name),
      containers: await boxes.containers(),
    }),
  });
  mountApi(app as unknown as Hono, { store, types, token, scheduler: options.scheduler ?? realScheduler });
  const host = options.host ?? "127.0.0.1";
  const ca = new SandboxCa("kubernetes-standin");
  const serving = ca.issue(host);
  const server = await serveStandIn({
    app,
    port: options.port,
    host,
    tls: { key: serving.keyPem, cert: serving.certPem },
    upgrades: [execRoute({ store, token, boxOf: (uid) => controller.boxOf(uid) })],
  });
  const ownDir = options.kubeconfigPath === undefined ? mkdtempSync(join(tmpdir(), "openma-kube-")) : null;
  const kubeconfigPath = options.kubeconfigPath ?? join(ownDir as string, "kubeconfig");
  writeFileSync(kubeconfigPath, kubeconfigFor(server.url, ca.certPem, token, options.namespace), { mode: 0o600 });
  const livePods = () => store.list(POD, undefined, selector(undefined, undefined));
  return standInHandle(
    {
      vendor: "kubernetes",
      url: server.url,
      env: { KUBECONFIG: kubeconfigPath },
      faults,
      requests,
      boxes,
      live: () => livePods().length,
      find: (name) => livePods().find((p) => p.metadata.name === name),
      running: (pod) => (pod.status as { phase?: string } | undefined)?.phase === "Running",
      hangs,
      // The controller stops before the boxes go, so no container it is still starting outlives the stand-in.
      servers: [server, { close: () => controller.close() }],
      afterBoxes: async () => {
        if (ownDir) rmSync(ownDir, { recursive: true, force: true });
      },
    },
    { store, types, controller, kubeconfigPath, token },
  );
}
