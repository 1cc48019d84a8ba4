/** The warm pool: not a driver of its own but a wrapper over every driver's ManagedSandboxPort (ADR 0027). */
import type { DriverConformance } from "../conformance.ts";
import { claimsNothing } from "./rows.ts";

export const POOL_ROWS: readonly DriverConformance[] = [
  {
    driver: "warm-pool",
    class: "local",
    implemented: true,
    package: "packages/warm-pool",
    summary:
      "Warm pools over any driver (bubblewrap, Docker, the cloud drivers), in the serve lane and the runtime-host lane: sandboxes of an environment started ahead under a pool scope with owner records, handed to one session each at claim, never reused, drained on shutdown.",
    // A wrapper adds no lane, strategy or fact: a pooled sandbox has exactly the capabilities of the driver under it.
    capabilities: claimsNothing("warm-pool"),
    planned: null,
    toolSandbox: false,
    testOnly: false,
    notes: [
      "`OPENMA_WARM_POOL=<environment id>=<size>,...` on `openma serve` (docs/warm-pools.md). Each pooled sandbox has an owner record (scope `warm-pool:<slot>`) before it starts, so a `kill -9` leaks nothing: the reaper ends it once the record's lease lapses. A claim rebinds the record to the session in one conditional statement and the sandbox is terminated when the session is done; none is ever handed to a second session.",
      "Fail closed (serve lane): a session takes a warm sandbox only when its profile (driver, plan, image, no environment packages, no network) equals the pool's and its host directories are still empty; anything else starts cold. With the egress gateway on (`OPENMA_EGRESS=on`, the default) no serve-lane pool starts, since the gateway is configured per session at acquire (the runtime-host lane opens no gateway, so its pools need nothing). In the runtime-host lane a claim must match the host's plan and driver.",
      "Counted as `pooled` in `openma doctor`'s `sandboxes` check and in `GET /v1/environments/{id}/work/stats` (`sandboxes[].pooled`). Proved in packages/warm-pool/src/pool.test.ts (fake driver, SQL owner records, 200 sessions, crash then reap) and test/serve/warm-pool.test.ts (real bubblewrap and Docker; 1,000 sessions each on bubblewrap and on Docker hold the target and leak nothing, docs/warm-pools.md).",
      "The runtime-host lane (`ama_worker`, fenced per Work) takes pooled sandboxes too, with `OPENMA_WARM_POOL`'s entry for its environment (ADR 0032): the host asks only under the held fence, after restoring /workspace; the claim moves the owner record to the session and binds the restored workspace and outputs into the running sandbox; the sandbox is killed with the run. A pool-scope reaper judges the pooled sandboxes by their owner records. Proved in test/runtime-host/ama-worker.e2e.test.ts (the official worker serves two turns in pooled bubblewrap and Docker sandboxes through startRuntimeHost) and test/runtime/warm-pool.test.ts on bubblewrap, Docker and E2B (its stand-in): each generation is served by a sandbox started before it and sees the previous one's published workspace, none serves twice, the pool drains to zero, and a process killed with a full pool and a claimed sandbox leaks nothing.",
    ],
  },
];
