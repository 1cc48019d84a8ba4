/**
 * `openma serve`'s ACP sessions: a session that pinned an ACP agent release
 * at creation (`metadata["openma.acp_agent"]`, docs/acp.md "Selecting an
 * agent") has its turns run by that agent instead of the default harness.
 *
 * Placement (docs/acp.md "Through the server"): the `AcpSessionRunner` runs
 * in this process and drives one ACP child per session across turns inside
 * the session's own bubblewrap sandbox, through the sandbox contract's
 * process port (the seed's "direct sandbox" placement, not yet the
 * in-sandbox supervisor of the `openma_supervised` lane). The sandbox has no
 * network: the agent reaches its model only through a host-side model
 * gateway on a unix socket bound into the sandbox, which injects the real
 * key (the agent holds a placeholder), and asks for the model the session's
 * agent version names (its setup hands it over, re-read on every
 * placement). The agent cache is bound read-only;
 * the workspace is the session's host workspace directory, so the native
 * state's durable copy (`/workspace/.openma/harness-state/acp/...`) outlives
 * a sandbox and a server: the next placement resumes from it, or recovers.
 */
import { mkdir, rm } from "node:fs/promises";
import { join } from "node:path";
import {
  type EventDraft as AcpEventDraft,
  type AcpReleaseCatalog,
  AcpSessionRunner,
  type CanonicalEvent,
  pendingTurn,
  releaseDir,
  sandboxAgentProcess,
  sandboxSpawn,
  setupForRelease,
  toolSandboxStatePort,
} from "@openma/acp";
import { appendEvents, type Logger, pinnedAcpRelease, sessionAgentModel } from "@openma/api";
import type { FenceIdentity, ManagedSandboxLease, RuntimeResourceScope } from "@openma/contract";
import { BubblewrapSandbox, bubblewrapProcesses } from "@openma/driver-bubblewrap";
import { type TurnOutcome, type TurnRunner, watchSession } from "@openma/execution";
import { GATEWAY_FORWARDER_DIR, GATEWAY_FORWARDER_SCRIPT, type ModelGateway, openModelGateway } from "@openma/model-gateway";
import type { Clock, IdFactory, Storage } from "@openma/storage";
import { planFor, SANDBOX_NODE_DIR, serveNodeRuntime, sessionDirs } from "./sandbox.ts";

/** Sessions whose pinned-or-not answer is remembered (the oldest is forgotten first). */
const PINNED_MEMO_SIZE = 10_000;

/** Loopback port of the in-sandbox forwarder to the gateway socket: the agent's model origin. */
const GATEWAY_PORT = 18080;
/** What the agent holds instead of the model key. */
const PLACEHOLDER_KEY = "openma-placeholder";
const AGENTS_MOUNT = "/openma/agents";
const GATEWAY_MOUNT = "/openma/gateway";
const FORWARDER_MOUNT = "/openma/gateway-bin";

export interface AcpSessionsOptions {
  storage: Storage;
  clock: Clock;
  ids: IdFactory;
  logger: Logger;
  dataDir: string;
  /** The agent cache (read-only in the sandbox) and the releases sessions pinned. */
  cacheRoot: string;
  catalog: AcpReleaseCatalog;
  /** The upstream the gateway forwards to and the key it injects (the server's model settings). */
  model: { baseUrl: string | undefined; apiKey: string | undefined };
}

interface Placement {
  runner: AcpSessionRunner;
  scope: RuntimeResourceScope;
  fence: FenceIdentity;
  lease: ManagedSandboxLease;
  gateway: ModelGateway;
}

interface LoggedEvent extends CanonicalEvent {
  seq: number;
}

export interface AcpSessions {
  /** The default runner for sessions without a pinned ACP release, the ACP agent for the others. */
  route(fallback: TurnRunner): TurnRunner;
  /** The session was archived or deleted: ends its placement (closes the ACP session, ends the sandbox). */
  release(sessionId: string): Promise<void>;
  /** Ends every placement (the native state's durable copy stays for the next server). */
  close(): Promise<void>;
}

export function openAcpSessions(options: AcpSessionsOptions): AcpSessions {
  const { storage, logger } = options;
  const gatewayRoot = join(options.dataDir, "acp-gateway");
  let driver: BubblewrapSandbox | null = null;
  // Sandboxes whose processes died with an earlier server (kill -9): their records go before the first placement.
  let reaped: Promise<unknown> | null = null;
  const placements = new Map<string, Promise<Placement>>();

  const sandboxDriver = (): BubblewrapSandbox => {
    const node = serveNodeRuntime();
    driver ??= new BubblewrapSandbox({
      stateRoot: join(options.dataDir, "acp-sandboxes"),
      // The sandbox runs as the server's user: the agent cache (default under ~/.cache) must be readable to it.
      hostUser: null,
      env: node.env,
      binds: [
        ...node.binds.map((b) => ({ ...b, writable: false })),
        { source: options.cacheRoot, target: AGENTS_MOUNT, writable: false },
        { source: gatewayRoot, target: GATEWAY_MOUNT, writable: false },
        { source: GATEWAY_FORWARDER_DIR, target: FORWARDER_MOUNT, writable: false },
      ],
    });
    return driver;
  };

  const readLog = async (sessionId: string): Promise<LoggedEvent[]> => {
    const rows = await storage.db
      .selectFrom("session_events")
      .select(["seq", "id", "type", "body"])
      .where("session_id", "=", sessionId)
      .orderBy("seq")
      .execute();
    return rows.map((r) => ({ ...(JSON.parse(r.body) as Record<string, unknown>), id: r.id, type: r.type, seq: Number(r.seq) }));
  };

  const publish = async (sessionId: string, events: AcpEventDraft[]): Promise<void> => {
    const drafts = events.map(({ id, type, ...fields }) => ({ id, type, fields, dedupeKey: null }));
    await appendEvents({ storage, clock: options.clock, ids: options.ids, logger }, sessionId, drafts);
  };

  const place = async (sessionId: string, history: CanonicalEvent[]): Promise<Placement> => {
    const pinned = await pinnedAcpRelease(storage.db, sessionId);
    if (!pinned) throw new Error(`session ${sessionId} pinned no ACP agent`);
    const installed = await options.catalog.installed(pinned);
    if (!installed)
      throw new Error(`the session's ACP agent ${pinned.package}@${pinned.version} (${pinned.integrity}) is not in the agent cache`);
    const { baseUrl, apiKey } = options.model;
    if (!baseUrl || !apiKey)
      throw new Error("ACP agents need OPENMA_MODEL_BASE_URL and OPENMA_MODEL_API_KEY (their model gateway's upstream)");
    // The model the session's agent version names, asked for by the agent (not secret: the key stays in the gateway).
    const model = (await sessionAgentModel(storage.db, sessionId)) ?? undefined;
    const setup = setupForRelease(pinned.id, { origin: `http://127.0.0.1:${GATEWAY_PORT}`, key: PLACEHOLDER_KEY, model });
    if (!setup) throw new Error(`no model setup is known for ACP agent ${pinned.id}`);
    await mkdir(gatewayRoot, { recursive: true, mode: 0o755 });
    const socketName = `${sessionId}.sock`;
    await rm(join(gatewayRoot, socketName), { force: true });
    const gateway = await openModelGateway({
      socketPath: join(gatewayRoot, socketName),
      upstream: baseUrl,
      apiKey: () => apiKey,
      keyStyle: setup.keyStyle,
    });
    const sandbox = sandboxDriver();
    reaped ??= sandbox.reapLeftovers().catch(() => 0);
    await reaped;
    try {
      const dirs = await sessionDirs(options.dataDir, sessionId, false);
      const scope = { environmentId: "acp", sessionId };
      const fence = { scope, ownerId: `acp-${process.pid}-${sessionId}`, generation: 1, expiresAt: Date.now() + 3650 * 86_400_000 };
      const acquired = await sandbox.acquire({
        scope,
        fence,
        plan: planFor("bubblewrap"),
        workspace: { bindingId: `ws-${sessionId}`, strategy: "ephemeral", mountPath: "/workspace", metadata: { hostPath: dirs.workspace } },
        outputs: {
          bindingId: `out-${sessionId}`,
          strategy: "final_collect",
          mountPath: "/mnt/session/outputs",
          metadata: { hostPath: dirs.outputs },
        },
        idempotencyKey: fence.ownerId,
        signal: AbortSignal.timeout(120_000),
      });
      if (acquired.type !== "acquired") throw new Error(`the ACP sandbox could not be started: ${acquired.reason}`);
      const lease = acquired.lease;
      const processes = bubblewrapProcesses(sandbox);
      let listening: () => void = () => {};
      const ready = new Promise<void>((resolve) => {
        listening = resolve;
      });
      const forwarder = await processes.spawn(lease, {
        command: ["node", `${FORWARDER_MOUNT}/${GATEWAY_FORWARDER_SCRIPT}`, String(GATEWAY_PORT), `${GATEWAY_MOUNT}/${socketName}`],
        onOutput: (stream, chunk) => {
          if (stream === "stdout" && Buffer.from(chunk).toString().includes("listening")) listening();
        },
      });
      if (forwarder.type !== "started") throw new Error(`the model gateway forwarder did not start: ${forwarder.message}`);
      await ready;
      const runner = new AcpSessionRunner({
        sessionId,
        agent: sandboxAgentProcess(installed.release, setup, {
          agentDir: releaseDir(AGENTS_MOUNT, installed.release),
          nodeDir: `${SANDBOX_NODE_DIR}/bin`,
        }),
        spawn: sandboxSpawn(processes, lease),
        state: toolSandboxStatePort(sandbox.toolSandbox(lease)),
        history,
        publish: (events) => publish(sessionId, events),
        // The workspace is the session's host directory: it is already where the next placement finds it.
        commitWorkspace: async () => {},
        ...(setup.configure ? { configure: setup.configure } : {}),
      });
      const started = await runner.start();
      logger.info(
        { session_id: sessionId, agent: `${pinned.package}@${pinned.version}`, model: setup.model, ...started },
        "ACP agent started",
      );
      return { runner, scope, fence, lease, gateway };
    } catch (error) {
      await gateway.close();
      throw error;
    }
  };

  /** Ends a placement: closes the ACP session, stops the child, ends the sandbox; the durable native copy stays. */
  const unplace = async (sessionId: string): Promise<void> => {
    const entry = placements.get(sessionId);
    placements.delete(sessionId);
    const p = await entry?.catch(() => null);
    if (!p) return;
    await p.runner.shutdown().catch(() => {});
    await driver
      ?.terminate({ scope: p.scope, fence: p.fence, lease: p.lease, reason: "completed", signal: AbortSignal.timeout(30_000) })
      .catch(() => {});
    await p.gateway.close().catch(() => {});
  };

  const runTurn = async (sessionId: string, signal: AbortSignal): Promise<TurnOutcome> => {
    const log = await readLog(sessionId);
    const turn = pendingTurn(log);
    if (!turn) return { type: "idle", stopReason: "end_turn" };
    let entry = placements.get(sessionId);
    if (!entry) {
      entry = place(sessionId, turn.history);
      placements.set(sessionId, entry);
    }
    const onAbort = () => {
      void entry.then((p) => p.runner.interrupt()).catch(() => {});
    };
    signal.addEventListener("abort", onAbort, { once: true });
    // A user.interrupt (or termination) while the turn runs: session/cancel, and the agent ends its turn.
    const watch = await watchSession(storage, sessionId, onAbort, (err) =>
      logger.warn({ session_id: sessionId, err: err.message }, "ACP turn watch failed"),
    );
    try {
      const p = await entry;
      const result = await p.runner.runTurn(turn.turnId, turn.prompt);
      return { type: "idle", stopReason: result.stopReason === "refusal" ? "refusal" : "end_turn" };
    } catch (error) {
      // The child or its sandbox is gone: the next attempt places it afresh (resume, or recovery).
      logger.warn({ session_id: sessionId, err: String(error) }, "ACP turn failed");
      await unplace(sessionId);
      return { type: "failed", error: String(error) };
    } finally {
      watch.close();
      signal.removeEventListener("abort", onAbort);
    }
  };

  return {
    route(fallback) {
      // A session pins its release (or none) when it is created and never changes it, so the answer is kept:
      // the worker asks before each of needsTurn and runTurn, a read each on the path to every model request.
      const known = new Map<string, boolean>();
      const pinned = async (sessionId: string) => {
        const hit = known.get(sessionId);
        if (hit !== undefined) return hit;
        const answer = (await pinnedAcpRelease(storage.db, sessionId)) !== null;
        if (known.size >= PINNED_MEMO_SIZE) known.delete(known.keys().next().value as string);
        known.set(sessionId, answer);
        return answer;
      };
      return {
        runTurn: async (sessionId, signal) =>
          (await pinned(sessionId)) ? runTurn(sessionId, signal) : fallback.runTurn(sessionId, signal),
        needsTurn: async (sessionId) =>
          (await pinned(sessionId)) ? pendingTurn(await readLog(sessionId)) !== null : fallback.needsTurn(sessionId),
        giveUp: (sessionId, input) => fallback.giveUp(sessionId, input),
      };
    },
    release: unplace,
    async close() {
      await Promise.all([...placements.keys()].map(unplace));
      await driver?.shutdown();
    },
  };
}
