/**
 * Exactly once per tick across two real `openma serve` processes on one
 * Postgres, 1,000 minutely ticks under a clock the test drives
 * (test/support/serve-clocked.ts), with a `kill -9` of one server in the
 * middle of a batch of ticks — twice, each time replaced by a fresh process.
 * Both servers run every tick of a batch in order, so each tick is raced;
 * the killed one dies right after it reported starting a tick (inside its
 * claim transaction or not, as it happens) and the survivor finishes the
 * batch. Every occurrence still becomes exactly one run and one session.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import Anthropic from "@anthropic-ai/sdk";
import { openTestStorage, type TestStorage } from "@openma/storage/testing";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { minutelyDeployment } from "../support/automation.ts";

const REPO_ROOT = fileURLToPath(new URL("../..", import.meta.url));
const ENTRY = join(REPO_ROOT, "test/support/serve-clocked.ts");
const KEY = "sk-ant-api03-serve-scheduler-kill-0123456789";
const TICKS = 1000;
const BATCH = 100;
/** Batches in which one server is killed mid-batch (the victim alternates). */
const KILL_IN = new Set([3, 7]);
const START = Date.parse("2026-06-01T00:00:30.000Z");

interface Server {
  proc: ChildProcess;
  url: string;
  dataDir: string;
  output: () => string;
  /** Resolves with the first message matching `pick`, or rejects when the process exits first. */
  next<T>(pick: (m: { at?: number; done?: number }) => T | undefined): Promise<T>;
}

async function startServer(store: TestStorage, initMs: number): Promise<Server> {
  const dataDir = mkdtempSync(join(tmpdir(), "openma-clocked-"));
  const proc = spawn(process.execPath, ["--import", "tsx", ENTRY], {
    cwd: REPO_ROOT,
    env: {
      ...process.env,
      PORT: "0",
      HOST: "127.0.0.1",
      DATABASE_URL: store.databaseUrl ?? "",
      OPENMA_PG_SCHEMA: store.pgSchema ?? "",
      OPENMA_DATA_DIR: dataDir,
      OPENMA_API_KEY: KEY,
      OPENMA_BRAIN: "off",
      OPENMA_WEBHOOKS: "off",
      OPENMA_AUTO_PROVISION: "off",
      LOG_LEVEL: "warn",
    },
    stdio: ["ignore", "pipe", "pipe", "ipc"],
  });
  let out = "";
  const listening = new Promise<string>((resolve, reject) => {
    const onData = (chunk: Buffer) => {
      out = (out + chunk.toString()).slice(-8192);
      const m = /OpenMA listening on (\S+)/.exec(out);
      if (m) resolve(m[1] as string);
    };
    proc.stdout?.on("data", onData);
    proc.stderr?.on("data", onData);
    proc.once("exit", (code) => reject(new Error(`serve exited (${code}) before listening:\n${out}`)));
  });
  const server: Server = {
    proc,
    url: "",
    dataDir,
    output: () => out,
    next(pick) {
      return new Promise((resolve, reject) => {
        const onMessage = (m: { at?: number; done?: number }) => {
          const hit = pick(m);
          if (hit === undefined) return;
          proc.off("message", onMessage);
          proc.off("exit", onExit);
          resolve(hit);
        };
        const onExit = () => reject(new Error(`serve exited:\n${out}`));
        proc.on("message", onMessage);
        proc.once("exit", onExit);
      });
    },
  };
  await server.next((m) => ("ready" in m ? true : undefined));
  proc.send({ init: initMs });
  server.url = await listening;
  return server;
}

function kill9(s: Server): Promise<void> {
  const exited = new Promise<void>((resolve) => s.proc.once("exit", () => resolve()));
  s.proc.kill("SIGKILL");
  return exited;
}

describe("two openma serve processes on one Postgres", () => {
  let store: TestStorage;
  const servers: Server[] = [];
  const dataDirs: string[] = [];
  beforeAll(async () => {
    store = await openTestStorage("postgres");
  });
  afterAll(async () => {
    for (const s of servers) s.proc.kill("SIGKILL");
    for (const d of dataDirs) rmSync(d, { recursive: true, force: true });
    await store?.cleanup();
  });

  it(`fire a minutely deployment exactly once per tick over ${TICKS} ticks with kill -9 mid-batch`, { timeout: 240_000 }, async () => {
    servers.push(...(await Promise.all([startServer(store, START), startServer(store, START)])));
    dataDirs.push(...servers.map((s) => s.dataDir));
    const client = new Anthropic({ baseURL: (servers[0] as Server).url, apiKey: KEY, maxRetries: 0 });
    const deployment = await minutelyDeployment(client);

    let kills = 0;
    for (let b = 0; b < TICKS / BATCH; b++) {
      const ticks = Array.from({ length: BATCH }, (_, k) => START + (b * BATCH + k + 1) * 60_000);
      const lastTick = ticks[BATCH - 1] as number;
      if (!KILL_IN.has(b)) {
        const done = servers.map((s) => s.next((m) => (m.done === lastTick ? true : undefined)));
        for (const s of servers) s.proc.send({ ticks });
        await Promise.all(done);
        continue;
      }
      const v = kills % 2;
      const victim = servers[v] as Server;
      const survivor = servers[1 - v] as Server;
      const mid = ticks[BATCH / 2] as number;
      const reachedMid = victim.next((m) => (m.at === mid ? true : undefined));
      const survivorDone = survivor.next((m) => (m.done === lastTick ? true : undefined));
      for (const s of servers) s.proc.send({ ticks });
      await reachedMid;
      await kill9(victim);
      kills++;
      await survivorDone;
      const fresh = await startServer(store, lastTick);
      servers[v] = fresh;
      dataDirs.push(fresh.dataDir);
    }
    expect(kills).toBe(KILL_IN.size);

    const runs = await store.storage.db
      .selectFrom("deployment_runs")
      .select("scheduled_at")
      .where("deployment_id", "=", deployment.id)
      .execute();
    expect(runs.length).toBe(TICKS);
    const scheduled = runs.map((r) => r.scheduled_at).sort();
    expect(scheduled).toEqual(Array.from({ length: TICKS }, (_, k) => new Date(START + 30_000 + k * 60_000).toISOString()));
    const sessions = await store.storage.db
      .selectFrom("sessions")
      .select((eb) => eb.fn.countAll<number>().as("n"))
      .executeTakeFirstOrThrow();
    expect(Number(sessions.n)).toBe(TICKS);
  });
});
