/**
 * The GKE dispatcher as a process: `openma-dispatch-gke` (or
 * `npx tsx packages/dispatch-gke/src/bin.ts`). Kubeconfig the usual way
 * (KUBECONFIG, ~/.kube/config, in-cluster). Configuration from the
 * environment, checked at start:
 *
 *   OPENMA_API_URL               the control plane as the dispatcher reaches it
 *   OPENMA_DISPATCH_POD_API_URL  the control plane as a pod reaches it (default OPENMA_API_URL)
 *   ANTHROPIC_ENVIRONMENT_ID     the self-hosted environment whose Work is dispatched
 *   ANTHROPIC_ENVIRONMENT_KEY    its environment key (a credential; never logged, never given to a pod)
 *   OPENMA_GKE_WARM_POOL         the SandboxWarmPool claims bind to
 *   OPENMA_GKE_NAMESPACE         default: the kubeconfig context's namespace, else `default`
 *   OPENMA_GKE_MAX_DISPATCHES    attempts per Work before it is stopped (default 3)
 *   OPENMA_GKE_READY_TIMEOUT_MS  how long a claim may take to bind and take the launcher, before the ack (default 120000)
 *   OPENMA_GKE_RECLAIM_MS        reclaim window passed to the poll (default: OPENMA_GKE_READY_TIMEOUT_MS)
 *   OPENMA_GKE_ONE_PASS=1        one pass, then exit (cron-style use, and tests)
 */
import Anthropic from "@anthropic-ai/sdk";
import { buildWorkerBundle, type WorkerBundle } from "@openma/runtime-host";
import { z } from "zod";
import { defaultKubeConfig, KubeCluster } from "./cluster.ts";
import { GkeDispatcher } from "./dispatcher.ts";

const Env = z.object({
  OPENMA_API_URL: z.url(),
  OPENMA_DISPATCH_POD_API_URL: z.url().optional(),
  ANTHROPIC_ENVIRONMENT_ID: z.string().min(1),
  ANTHROPIC_ENVIRONMENT_KEY: z.string().min(1),
  OPENMA_GKE_WARM_POOL: z.string().min(1),
  OPENMA_GKE_NAMESPACE: z.string().min(1).optional(),
  OPENMA_GKE_MAX_DISPATCHES: z.coerce.number().int().min(1).max(100).default(3),
  OPENMA_GKE_READY_TIMEOUT_MS: z.coerce.number().int().min(1000).max(3_600_000).default(120_000),
  OPENMA_GKE_RECLAIM_MS: z.coerce.number().int().min(0).max(86_400_000).optional(),
  OPENMA_GKE_ONE_PASS: z.enum(["0", "1"]).default("0"),
});

const parsed = Env.safeParse(process.env);
if (!parsed.success) {
  // Names and issues only: a value may be a credential.
  for (const issue of parsed.error.issues) process.stderr.write(`openma-dispatch-gke: ${issue.path.join(".")}: ${issue.message}\n`);
  process.exit(2);
}
const env = parsed.data;
const kubeConfig = defaultKubeConfig();
const namespace = env.OPENMA_GKE_NAMESPACE ?? kubeConfig.getContextObject(kubeConfig.getCurrentContext())?.namespace ?? "default";
let bundle: Promise<WorkerBundle> | null = null;
const dispatcher = new GkeDispatcher({
  client: new Anthropic({ baseURL: env.OPENMA_API_URL, apiKey: null, authToken: env.ANTHROPIC_ENVIRONMENT_KEY }),
  environmentId: env.ANTHROPIC_ENVIRONMENT_ID,
  environmentKey: env.ANTHROPIC_ENVIRONMENT_KEY,
  cluster: new KubeCluster({ namespace, kubeConfig }),
  warmPool: env.OPENMA_GKE_WARM_POOL,
  apiUrl: env.OPENMA_DISPATCH_POD_API_URL ?? env.OPENMA_API_URL,
  bundle: () => {
    bundle ??= buildWorkerBundle();
    return bundle;
  },
  maxDispatches: env.OPENMA_GKE_MAX_DISPATCHES,
  readyTimeoutMs: env.OPENMA_GKE_READY_TIMEOUT_MS,
  ...(env.OPENMA_GKE_RECLAIM_MS === undefined ? {} : { reclaimOlderThanMs: env.OPENMA_GKE_RECLAIM_MS }),
  log: (line) => process.stderr.write(`openma-dispatch-gke: ${line}\n`),
});
const stop = new AbortController();
process.once("SIGTERM", () => stop.abort());
process.once("SIGINT", () => stop.abort());
if (env.OPENMA_GKE_ONE_PASS === "1") {
  const outcome = await dispatcher.pass(stop.signal);
  process.stdout.write(`${JSON.stringify(outcome)}\n`);
} else await dispatcher.run(stop.signal);
