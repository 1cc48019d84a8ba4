/**
 * What the egress gateway costs: `npx tsx bench/egress.ts [runs=10]` (env
 * `BENCH_WARMUP`, default 2; `BENCH_MIB`, default 64). Needs root, bwrap and
 * Docker with the base image (`npm run provision`); a missing one fails the run.
 *
 * 1. First tool result, per local driver: `openma serve`'s session resolver
 *    (sandbox.ts, the code serve runs) acquires a fresh session sandbox and
 *    runs `true` in it; t0 before `resolve`, t1 when the exec returns. Three
 *    compositions, interleaved per iteration so all see the same load:
 *    without a gateway (the baseline), with the gateway (unrestricted, no
 *    credential), and with the gateway plus one credential (a per-sandbox CA
 *    is minted). Reported as medians and as ratios against the baseline.
 * 2. Throughput: one HTTP server on 0.0.0.0 sends BENCH_MIB MiB; the host
 *    downloads it directly over loopback (the baseline) and through an
 *    EgressGateway (absolute-form request to the host's non-loopback address,
 *    the way a sandbox's curl goes out). Reported as MiB/s and as a ratio.
 */
import { mkdtemp, rm } from "node:fs/promises";
import http from "node:http";
import net, { type AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Logger } from "@openma/api";
import type { CredentialEgressPort, SandboxRequest } from "@openma/contract";
import { EgressGateway, EgressPolicy, GatewayEgressPort, type SandboxEgressConfig } from "@openma/egress";
import { hostIpv4 } from "@openma/egress/testing";
import { hostProbes, openBackend, type SandboxSelection, sessionSandboxes } from "../apps/openma/src/sandbox.ts";
import { reportTarget } from "./report.ts";

const runs = Number(process.argv[2] ?? 10);
const warmup = Number(process.env.BENCH_WARMUP ?? 2);
const mib = Number(process.env.BENCH_MIB ?? 64);

const silent = { info() {}, warn() {}, error() {}, debug() {} } as unknown as Logger;
const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? (s[(s.length - 1) / 2] as number) : ((s[s.length / 2 - 1] as number) + (s[s.length / 2] as number)) / 2;
};
const ms = (x: number) => `${x.toFixed(1)} ms`;

const environment = { id: "env_bench", config: { type: "cloud", networking: { type: "unrestricted" } } };
const port = (config: SandboxEgressConfig): CredentialEgressPort => new GatewayEgressPort({ configFor: async () => config });
const VARIANTS: Array<[string, CredentialEgressPort | null]> = [
  ["no gateway", null],
  ["gateway", port({ networking: { type: "unrestricted" }, credentials: [] })],
  [
    "gateway + credential",
    port({
      networking: { type: "unrestricted" },
      credentials: [{ secretName: "API_TOKEN", secret: "bench-secret", hosts: ["api.bench.invalid"], header: true, body: false }],
    }),
  ],
];

/** No issue sets a number for the gateway's cost (ADR 0020); the ratios are recorded so the table shows them. */
const recorded = (metric: string, measured: number) =>
  reportTarget({ bench: "egress", metric, target: "none (recorded)", measured, unit: "x", pass: true });

async function firstToolResult(selection: Exclude<SandboxSelection, { type: "none" }>): Promise<void> {
  const dataDir = await mkdtemp(join(tmpdir(), "openma-bench-egress-"));
  const resolvers = await Promise.all(
    VARIANTS.map(async ([, egress]) => sessionSandboxes(await openBackend(selection, {}, egress), { dataDir, logger: silent })),
  );
  const times: number[][] = VARIANTS.map(() => []);
  try {
    for (let i = 0; i < warmup + runs; i++) {
      for (const [v, sandboxes] of resolvers.entries()) {
        const sessionId = `sesn_bench_${v}_${i}`;
        const request: SandboxRequest = { sessionId, environmentId: environment.id, environment, signal: AbortSignal.timeout(120_000) };
        const t0 = performance.now();
        const resolved = await sandboxes.resolve(request);
        if (resolved.type !== "ready") throw new Error(`${selection.type}: ${resolved.reason}`);
        const result = await resolved.port.exec({ command: ["true"], timeoutMs: 30_000, signal: AbortSignal.timeout(60_000) });
        const t1 = performance.now();
        if (result.type !== "exited" || result.exitCode !== 0) throw new Error(`${selection.type}: true did not succeed`);
        if (i >= warmup) times[v]?.push(t1 - t0);
        await sandboxes.release(sessionId);
      }
    }
  } finally {
    for (const sandboxes of resolvers) await sandboxes.close();
    await rm(dataDir, { recursive: true, force: true });
  }
  const base = median(times[0] ?? []);
  for (const [v, [name]] of VARIANTS.entries()) {
    const m = median(times[v] ?? []);
    const ratio = v === 0 ? "baseline" : `${(m / base).toFixed(2)}x`;
    console.log(`  ${name.padEnd(22)} ${ms(m).padStart(10)}  ${ratio}`);
    if (v > 0) recorded(`first tool result with ${name} vs without (median, ${selection.type})`, m / base);
  }
}

async function download(options: http.RequestOptions): Promise<number> {
  return new Promise((resolve, reject) => {
    const t0 = performance.now();
    http
      .get(options, (res) => {
        let bytes = 0;
        res.on("data", (chunk: Buffer) => {
          bytes += chunk.length;
        });
        res.on("end", () => {
          if (bytes !== mib * 1024 * 1024) reject(new Error(`got ${bytes} bytes, status ${res.statusCode}`));
          else resolve(mib / ((performance.now() - t0) / 1000));
        });
      })
      .on("error", reject);
  });
}

async function throughput(): Promise<void> {
  const chunk = Buffer.alloc(1024 * 1024, 7);
  const upstream = http.createServer((_req, res) => {
    res.setHeader("content-length", mib * 1024 * 1024);
    let sent = 0;
    const pump = () => {
      while (sent < mib) {
        sent++;
        if (!res.write(chunk)) return void res.once("drain", pump);
      }
      res.end();
    };
    pump();
  });
  await new Promise<void>((resolve) => upstream.listen(0, "0.0.0.0", resolve));
  const upstreamPort = (upstream.address() as AddressInfo).port;
  const gateway = new EgressGateway({ sandbox: "bench", policy: new EgressPolicy({ networking: { type: "unrestricted" } }) });
  const listener = net.createServer((socket) => gateway.accept(socket));
  await new Promise<void>((resolve) => listener.listen(0, "127.0.0.1", resolve));
  const proxyPort = (listener.address() as AddressInfo).port;
  const hostIp = hostIpv4();
  const agent = () => new http.Agent({ keepAlive: false });
  const direct: number[] = [];
  const proxied: number[] = [];
  try {
    for (let i = 0; i < warmup + runs; i++) {
      const d = await download({ host: "127.0.0.1", port: upstreamPort, path: "/", agent: agent() });
      const p = await download({ host: "127.0.0.1", port: proxyPort, path: `http://${hostIp}:${upstreamPort}/`, agent: agent() });
      if (i >= warmup) {
        direct.push(d);
        proxied.push(p);
      }
    }
  } finally {
    gateway.close();
    listener.close();
    upstream.closeAllConnections();
    upstream.close();
  }
  const d = median(direct);
  const p = median(proxied);
  console.log(`  direct loopback        ${d.toFixed(0).padStart(7)} MiB/s  baseline`);
  console.log(`  through the gateway    ${p.toFixed(0).padStart(7)} MiB/s  ${(p / d).toFixed(2)}x`);
  recorded(`HTTP download of ${mib} MiB through the gateway vs direct loopback (median MiB/s)`, p / d);
}

async function main(): Promise<void> {
  console.log(`egress gateway benchmark: ${runs} runs (+${warmup} warm-up), medians`);
  const bwrap = await hostProbes.bubblewrap();
  if (!bwrap.ok) throw new Error(`bubblewrap: ${bwrap.reason}`);
  const docker = await hostProbes.docker();
  if (!docker.ok) throw new Error(`docker: ${docker.reason}`);
  console.log("first tool result (serve resolver: acquire + exec true), bubblewrap:");
  await firstToolResult({ type: "bubblewrap" });
  console.log("first tool result (serve resolver: acquire + exec true), docker:");
  await firstToolResult({ type: "docker", image: docker.image });
  console.log(`HTTP download of ${mib} MiB from the host:`);
  await throughput();
}

main().catch((err: unknown) => {
  console.error(err);
  process.exit(1);
});
