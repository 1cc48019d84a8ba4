/**
 * Session create → first tool result on each cloud driver, against the same
 * vendor stand-in driven directly through the vendor's SDK:
 * `npx tsx bench/cloud-first-exec.ts [runs=10]` (env `BENCH_WARMUP`,
 * default 2; `BENCH_VENDORS=e2b,daytona,sprites,blaxel,vercel,modal,superserve,boxrun,cloudflare-bridge,cloudflare`). Needs Docker with the
 * sandbox images (the stand-ins run real containers).
 *
 * Per vendor it starts the stand-in in this process and a real `openma
 * serve` child process (SQLite, brain on, OPENMA_SANDBOX=<vendor>, the
 * vendor's variables pointing at the stand-in), then measures per
 * iteration, in turn:
 *
 *   host  t0 just before `client.beta.sessions.create` (official SDK); a
 *         message the scripted model answers with a `bash` tool_use running
 *         `true`; t1 when its `agent.tool_result` arrives on the stream. Each
 *         session is new, so this includes creating its remote sandbox (on
 *         the first sandbox tool call) through the driver and its SDK.
 *   sdk   the vendor's SDK alone against the same stand-in: create a sandbox
 *         and run `true` in it (E2B `Sandbox.create` + `commands.run`,
 *         Daytona `create` + `process.executeCommand`, Sprites
 *         `createSprite` + `execFile`, Vercel `Sandbox.create` routed by its
 *         per-call `fetch` + `runCommand`, Superserve `Sandbox.create` +
 *         `commands.run` with its data plane routed as the driver routes
 *         it, BoxLite's REST client `create` + `exec` and its `wait`; for
 *         the Cloudflare bridge, which has no official Node client, our
 *         typed client of its OpenAPI document: `POST /v1/sandbox` + an
 *         exec of `true`, and for our Worker the same with its egress
 *         route in between); the removal that follows is not counted.
 *
 * The ratio host / sdk is what OpenMA adds on top of the provider's own
 * create + exec (the agent loop, the driver's ownership labels, directory
 * preparation, the exec wrapper). The stand-in must hold no sandbox once the
 * server stopped: the run fails otherwise.
 */
import { randomBytes } from "node:crypto";
import { readFileSync } from "node:fs";
import { cpus } from "node:os";
import { initialize, SandboxInstance } from "@blaxel/core";
import { Daytona } from "@daytonaio/sdk";
import { SpritesClient } from "@fly/sprites";
import { createBridgeClient } from "@openma/cloudflare-bridge-client";
import { boxRunRuntime } from "@openma/driver-boxrun/provider";
import { routeDataPlane } from "@openma/driver-superserve";
import { routedFetch } from "@openma/driver-vercel";
import { startScriptedModel } from "@openma/scripted-model";
import type { CloudStandIn } from "@openma/standin-kit";
import { resolveConfig, Sandbox as SuperserveSandbox } from "@superserve/sdk";
import { Sandbox as VercelSandbox } from "@vercel/sandbox";
import { Sandbox } from "e2b";
import { ModalClient } from "modal";
import { startServeProcess } from "../test/support/child-server.ts";
import { startVendorStandIn, VENDORS, type Vendor } from "../test/support/cloud.ts";
import { reportTarget } from "./report.ts";
import { createBenchAgent, MODEL_KEY, measuredRuns, SCRIPT, sessionOnce, summary } from "./session-first-exec.ts";

/** Our Worker's egress route with nothing allowed and no credential (what the driver sends when given no egress). */
async function putEgress(url: string, apiKey: string, id: string): Promise<void> {
  const response = await fetch(`${url}/openma/v1/sandbox/${id}/egress`, {
    method: "PUT",
    headers: { authorization: `Bearer ${apiKey}`, "content-type": "application/json" },
    body: JSON.stringify({ networking: { type: "limited", allowed_hosts: [] }, credentials: [] }),
    signal: AbortSignal.timeout(120_000),
  });
  if (!response.ok) throw new Error(`the Worker's egress route answered ${response.status}`);
}

/** One create + exec through the vendor's SDK; resolves with the timed ms and a cleanup (not timed). */
async function sdkOnce(vendor: Vendor, standIn: CloudStandIn): Promise<{ ms: number; cleanup: () => Promise<unknown> }> {
  const env = standIn.env;
  const t0 = performance.now();
  if (vendor === "e2b") {
    const sandbox = await Sandbox.create("base", { apiKey: env.E2B_API_KEY, apiUrl: env.E2B_API_URL, sandboxUrl: env.E2B_SANDBOX_URL });
    await sandbox.commands.run("true");
    return { ms: performance.now() - t0, cleanup: () => sandbox.kill() };
  }
  if (vendor === "daytona") {
    const daytona = new Daytona({ apiKey: env.DAYTONA_API_KEY, apiUrl: env.DAYTONA_API_URL, useDeprecatedPolling: true });
    const sandbox = await daytona.create({ name: `bench-${randomBytes(6).toString("hex")}` });
    await sandbox.process.executeCommand("true");
    return { ms: performance.now() - t0, cleanup: () => sandbox.delete() };
  }
  if (vendor === "blaxel") {
    // The SDK reads its endpoints from the environment and keeps its account in module state.
    process.env.BL_API_URL = env.BL_API_URL;
    process.env.BL_RUN_URL = env.BL_RUN_URL;
    initialize({ apikey: env.BL_API_KEY, workspace: env.BL_WORKSPACE, disableH2: true });
    const sandbox = await SandboxInstance.create({ name: `bench-${randomBytes(6).toString("hex")}`, region: env.BL_REGION });
    await sandbox.process.exec({ command: "true", waitForCompletion: true });
    return { ms: performance.now() - t0, cleanup: () => sandbox.delete() };
  }
  if (vendor === "vercel") {
    const sandbox = await VercelSandbox.create({
      token: env.VERCEL_TOKEN as string,
      teamId: env.VERCEL_TEAM_ID as string,
      projectId: env.VERCEL_PROJECT_ID as string,
      fetch: routedFetch(env.OPENMA_VERCEL_API_URL),
      name: `bench-${randomBytes(6).toString("hex")}`,
      persistent: true,
    });
    await sandbox.runCommand("true");
    return { ms: performance.now() - t0, cleanup: () => sandbox.delete() };
  }
  if (vendor === "boxrun") {
    const runtime = boxRunRuntime({ url: env.BOXLITE_REST_URL as string, apiKey: env.BOXLITE_API_KEY as string });
    const box = await runtime.create({ image: "node:24-bookworm-slim", detach: true }, `bench-${randomBytes(6).toString("hex")}`);
    await (await box.exec("true", [], null, false, null, null, null)).wait();
    return { ms: performance.now() - t0, cleanup: () => runtime.remove(box.id, true) };
  }
  if (vendor === "cloudflare-bridge" || vendor === "cloudflare") {
    const url = (vendor === "cloudflare" ? env.CLOUDFLARE_WORKER_URL : env.CLOUDFLARE_BRIDGE_URL) as string;
    const bridge = createBridgeClient({ url, apiKey: env.SANDBOX_API_KEY as string });
    const id = await bridge.create(AbortSignal.timeout(120_000));
    // Our Worker lets nothing out of a sandbox until its egress is stored: by hand, as docs/cloudflare-worker.md says.
    if (vendor === "cloudflare") await putEgress(url, env.SANDBOX_API_KEY as string, id);
    const end = await bridge.exec(id, { argv: ["true"] }, { signal: AbortSignal.timeout(120_000), onOutput: () => {} });
    if (end.type !== "exit" || end.exitCode !== 0) throw new Error(`the bridge's exec of true ended ${JSON.stringify(end)}`);
    return { ms: performance.now() - t0, cleanup: () => bridge.destroy(id, AbortSignal.timeout(120_000)) };
  }
  if (vendor === "modal") {
    // The SDK takes its address from the environment only; the same app, image and volume mount as the driver.
    process.env.MODAL_SERVER_URL = env.MODAL_SERVER_URL;
    const modal = new ModalClient({ tokenId: env.MODAL_TOKEN_ID, tokenSecret: env.MODAL_TOKEN_SECRET, logLevel: "error" });
    const app = await modal.apps.fromName("openma", { createIfMissing: true });
    const volume = await modal.volumes.fromName("openma-workspaces", { createIfMissing: true, version: 2 });
    const sandbox = await modal.sandboxes.create(app, modal.images.fromRegistry("node:24-bookworm-slim"), {
      volumes: { "/workspace": volume.withMountOptions({ subPath: `bench/${randomBytes(6).toString("hex")}` }) },
    });
    await (await sandbox.exec(["true"])).wait();
    return { ms: performance.now() - t0, cleanup: () => sandbox.terminate() };
  }
  if (vendor === "superserve") {
    // The SDK derives its data-plane host; it is reached the way the driver reaches it (ADR 0017), set up before t0 counts.
    const connection = { apiKey: env.SUPERSERVE_API_KEY as string, baseUrl: env.SUPERSERVE_BASE_URL as string };
    routeDataPlane(resolveConfig(connection).sandboxHost, {
      url: env.OPENMA_SUPERSERVE_DATA_PLANE_URL as string,
      caPem: readFileSync(env.OPENMA_SUPERSERVE_DATA_PLANE_CA as string, "utf8"),
    });
    const start = performance.now();
    const sandbox = await SuperserveSandbox.create({ ...connection, name: `bench-${randomBytes(6).toString("hex")}` });
    await sandbox.commands.run("true");
    return { ms: performance.now() - start, cleanup: () => sandbox.kill() };
  }
  const client = new SpritesClient(env.SPRITES_TOKEN as string, { baseURL: env.SPRITES_API_URL });
  const sprite = await client.createSprite(`bench-${randomBytes(6).toString("hex")}`);
  await sprite.execFile("true");
  return { ms: performance.now() - t0, cleanup: () => sprite.delete() };
}

interface Row {
  vendor: Vendor;
  host: number[];
  sdk: number[];
  sessions: number;
}

async function benchOne(vendor: Vendor): Promise<Row> {
  const standIn = await startVendorStandIn(vendor);
  const model = await startScriptedModel({ apiKey: MODEL_KEY, script: SCRIPT });
  try {
    const serve = await startServeProcess({
      apiKey: `sk-bench-${randomBytes(16).toString("hex")}`,
      env: {
        LOG_LEVEL: "warn",
        OPENMA_BRAIN: "on",
        OPENMA_SANDBOX: vendor,
        ...standIn.env,
        OPENMA_MODEL_BASE_URL: model.url,
        OPENMA_MODEL_API_KEY: MODEL_KEY,
        OPENMA_EXECUTION_POLL_MS: "600000",
      },
    });
    let runs: { host: number; sdk: number }[];
    try {
      const { client } = serve;
      const envId = (await client.beta.environments.create({ name: `bench-${vendor}` })).id;
      const agent = await createBenchAgent(client);
      runs = await measuredRuns(async () => {
        const host = await sessionOnce(client, agent, envId, "tool");
        const direct = await sdkOnce(vendor, standIn);
        await direct.cleanup();
        return { host, sdk: direct.ms };
      });
    } finally {
      await serve.close();
    }
    if (standIn.live() > 0) throw new Error(`${standIn.live()} ${vendor} sandbox(es) outlived their server`);
    return { vendor, host: runs.map((r) => r.host), sdk: runs.map((r) => r.sdk), sessions: runs.length };
  } finally {
    await model.close();
    await standIn.close();
  }
}

async function main(): Promise<void> {
  const wanted = (process.env.BENCH_VENDORS ?? VENDORS.join(",")).split(",") as Vendor[];
  const rows: Row[] = [];
  for (const vendor of wanted) rows.push(await benchOne(vendor));
  const cpu = cpus()[0]?.model ?? "unknown CPU";
  console.log(
    `Session create -> first tool result on the cloud drivers (stand-ins, real containers): ${rows[0]?.sessions ?? 0} measured runs per vendor, ${cpus().length} CPUs (${cpu}), Node ${process.version}, ${new Date().toISOString()}\n`,
  );
  console.log("| Driver | Host p50 | Host p95 | SDK create + exec p50 | SDK create + exec p95 | Host / SDK |");
  console.log("|---|---|---|---|---|---|");
  const f = (x: number) => `${x.toFixed(1)} ms`;
  for (const r of rows) {
    const h = summary(r.host);
    const s = summary(r.sdk);
    console.log(`| ${r.vendor} | ${f(h.p50)} | ${f(h.p95)} | ${f(s.p50)} | ${f(s.p95)} | ${(h.p50 / s.p50).toFixed(2)}x |`);
    // No issue sets a number for the cloud drivers; the ratio is recorded so the table shows it.
    reportTarget({
      bench: "cloud-first-exec",
      metric: `session create -> first tool result vs the SDK's create + exec (p50, ${r.vendor})`,
      target: "none (recorded)",
      measured: h.p50 / s.p50,
      unit: "x",
      pass: true,
    });
  }
  console.log(
    "\nRatios use p50s. Host sessions are new each time (each creates its remote sandbox) and are archived once idle, outside the timed span.",
  );
}

main().catch((err: Error) => {
  console.error(err);
  process.exit(1);
});
