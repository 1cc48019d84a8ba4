/**
 * The emulated agent-sandbox controller over real Docker containers, seen
 * through two independent clients: the official `@kubernetes/client-node`
 * and Debian's kubectl (`kubernetes-client`, installed by
 * scripts/provision.sh), both reading the kubeconfig the stand-in wrote.
 * A SandboxWarmPool really pre-starts its pods; a SandboxClaim adopts one
 * (owner references, labels, the pod-name annotation, forwarded Ready) and
 * the pool replenishes; pods/exec really runs in the claimed container,
 * stdin in and the exit code back; deleting the claim (with kubectl)
 * removes its Sandbox, its Pod and the container.
 */
import { execFile } from "node:child_process";
import { PassThrough, Writable } from "node:stream";
import { promisify } from "node:util";
import { CoreV1Api, CustomObjectsApi, Exec, KubeConfig, type V1Status, Watch } from "@kubernetes/client-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { POD_NAME_ANNOTATION, SANDBOX_NAME_ANNOTATION, WARM_POOL_LABEL } from "./controller.ts";
import { debianKubectl } from "./kubectl.ts";
import { type KubernetesStandIn, startKubernetesStandIn } from "./server.ts";

const run = promisify(execFile);
const G = "extensions.agents.x-k8s.io";
const V = "v1beta1";
const NS = "default";

let standIn: KubernetesStandIn;
let kc: KubeConfig;
let api: CustomObjectsApi;
let core: CoreV1Api;

async function kubectl(...args: string[]): Promise<string> {
  const { stdout } = await run(debianKubectl(), ["--kubeconfig", standIn.kubeconfigPath, ...args], { timeout: 30_000 });
  return stdout;
}

/** Resolves with the first object of `plural` for which `test` holds (a watch, no polling). */
function waitFor<T>(group: string, plural: string, test: (obj: T) => boolean): Promise<T> {
  return new Promise((resolve, reject) => {
    let controller: AbortController | null = null;
    let found: T | null = null;
    const path = group === "" ? `/api/v1/namespaces/${NS}/${plural}` : `/apis/${group}/${V}/namespaces/${NS}/${plural}`;
    void new Watch(kc)
      .watch(
        path,
        {},
        (_type, obj: T) => {
          if (found === null && test(obj)) {
            found = obj;
            controller?.abort();
            resolve(obj);
          }
        },
        (err) => {
          if (found === null && err) reject(err);
        },
      )
      .then((c) => {
        controller = c;
        if (found !== null) c.abort();
      }, reject);
  });
}

beforeAll(async () => {
  standIn = await startKubernetesStandIn();
  kc = new KubeConfig();
  kc.loadFromFile(standIn.kubeconfigPath);
  api = kc.makeApiClient(CustomObjectsApi);
  core = kc.makeApiClient(CoreV1Api);
});
afterAll(async () => {
  await standIn?.close();
});

type Pool = { status?: { readyReplicas?: number; replicas?: number } };
type Claim = {
  metadata: { uid: string; annotations?: Record<string, string> };
  status?: { sandbox?: { name: string; podIPs: string[] }; conditions?: { type: string; status: string; reason: string }[] };
};
type Sandbox = {
  metadata: {
    name: string;
    labels?: Record<string, string>;
    annotations?: Record<string, string>;
    ownerReferences?: { kind: string; uid: string; controller?: boolean }[];
  };
};

describe("the emulated agent-sandbox controller over real containers", () => {
  it("pre-starts a warm pool, binds a claim, execs in its pod, and deletes it all with the claim", async () => {
    await api.createNamespacedCustomObject({
      group: G,
      version: V,
      namespace: NS,
      plural: "sandboxtemplates",
      body: {
        metadata: { name: "worker" },
        spec: { podTemplate: { spec: { containers: [{ name: "worker", image: "openma/sandbox-base" }] } } },
      },
    });
    await api.createNamespacedCustomObject({
      group: G,
      version: V,
      namespace: NS,
      plural: "sandboxwarmpools",
      body: { metadata: { name: "pool" }, spec: { replicas: 2, sandboxTemplateRef: { name: "worker" } } },
    });
    await waitFor<Pool>(G, "sandboxwarmpools", (p) => p.status?.readyReplicas === 2);
    // The warm pods are real, running containers before anything claims them.
    expect(await standIn.boxes.containers()).toHaveLength(2);
    const warm = await core.listNamespacedPod({ namespace: NS });
    expect(warm.items.map((p) => p.status?.phase)).toEqual(["Running", "Running"]);

    await api.createNamespacedCustomObject({
      group: G,
      version: V,
      namespace: NS,
      plural: "sandboxclaims",
      body: { metadata: { name: "claim-1" }, spec: { warmPoolRef: { name: "pool" } } },
    });
    const claim = await waitFor<Claim>(
      G,
      "sandboxclaims",
      (c) => c.status?.conditions?.some((x) => x.type === "Ready" && x.status === "True") === true,
    );
    const sandboxName = claim.status?.sandbox?.name as string;
    expect(claim.metadata.annotations?.[SANDBOX_NAME_ANNOTATION]).toBe(sandboxName);
    expect(claim.status?.sandbox?.podIPs[0]).toMatch(/^127\.0\.10\.\d+$/);
    const sandbox = (await api.getNamespacedCustomObject({
      group: "agents.x-k8s.io",
      version: V,
      namespace: NS,
      plural: "sandboxes",
      name: sandboxName,
    })) as Sandbox;
    expect(sandbox.metadata.ownerReferences).toEqual([
      expect.objectContaining({ kind: "SandboxClaim", uid: claim.metadata.uid, controller: true }),
    ]);
    expect(sandbox.metadata.labels?.[WARM_POOL_LABEL]).toBeUndefined();
    expect(sandbox.metadata.labels).toMatchObject({
      "agents.x-k8s.io/claim-uid": claim.metadata.uid,
      "agents.x-k8s.io/launch-type": "warm",
    });
    const podName = sandbox.metadata.annotations?.[POD_NAME_ANNOTATION] as string;
    // The pool replenishes: two warm again, plus the claimed one.
    await waitFor<Pool>(G, "sandboxwarmpools", (p) => p.status?.readyReplicas === 2);
    await standIn.controller.settled();
    expect(await standIn.boxes.containers()).toHaveLength(3);

    // kubectl (Debian's, a second client) sees the claim, bound and Ready, through the CRD's printer columns.
    const table = await kubectl("get", "sandboxclaims");
    expect(table).toMatch(/NAME\s+READY\s+SANDBOX\s+REASON\s+AGE/);
    expect(table).toMatch(new RegExp(`claim-1\\s+True\\s+${sandboxName}\\s+DependenciesReady`));
    expect(await kubectl("get", "swp", "pool", "-o", "jsonpath={.status.readyReplicas}")).toBe("2");
    expect(JSON.parse(await kubectl("get", "sandbox", sandboxName, "-o", "json"))).toMatchObject({ metadata: { name: sandboxName } });

    // pods/exec runs in the claimed container: stdin in, stdout and stderr apart, the exit code in the final Status.
    const result = await execIn(podName, ["sh", "-c", "cat; echo to-stderr >&2; exit 3"], "hello from stdin\n");
    expect(result).toEqual({ stdout: "hello from stdin\n", stderr: "to-stderr\n", exitCode: 3 });
    expect((await execIn(podName, ["true"], null)).exitCode).toBe(0);

    // Deleting the claim (with kubectl) garbage-collects its Sandbox and Pod, and the container goes.
    await kubectl("delete", "sandboxclaim", "claim-1");
    await standIn.controller.settled();
    await expect(core.readNamespacedPod({ name: podName, namespace: NS })).rejects.toMatchObject({ code: 404 });
    expect(await standIn.boxes.containers()).toHaveLength(2);
    expect(await kubectl("get", "sandboxclaims")).not.toContain("claim-1");

    // Deleting the pool takes its warm sandboxes, their pods and containers with it.
    await api.deleteNamespacedCustomObject({ group: G, version: V, namespace: NS, plural: "sandboxwarmpools", name: "pool" });
    await standIn.controller.settled();
    expect(await standIn.boxes.containers()).toEqual([]);
    expect((await core.listNamespacedPod({ namespace: NS })).items).toEqual([]);
  });
});

async function execIn(pod: string, command: string[], stdin: string | null): Promise<{ stdout: string; stderr: string; exitCode: number }> {
  let stdout = "";
  let stderr = "";
  const sink = (append: (s: string) => void) =>
    new Writable({
      write(chunk: Buffer, _e, done) {
        append(chunk.toString("utf8"));
        done();
      },
    });
  const input = stdin === null ? null : new PassThrough();
  let status: V1Status | null = null;
  const socket = await new Exec(kc).exec(
    NS,
    pod,
    "worker",
    command,
    sink((s) => (stdout += s)),
    sink((s) => (stderr += s)),
    input,
    false,
    (s) => {
      status = s;
    },
  );
  if (input !== null) input.end(stdin);
  await new Promise((resolve) => socket.on("close", resolve));
  const final = status as V1Status | null;
  const code = final?.status === "Success" ? 0 : Number(final?.details?.causes?.find((c) => c.reason === "ExitCode")?.message);
  return { stdout, stderr, exitCode: code };
}
