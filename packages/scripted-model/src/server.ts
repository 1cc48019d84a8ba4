/**
 * `startScriptedModel`: the scripted Messages API on a real HTTP port, for the
 * official SDK to reach by `baseURL`.
 */
import type { AddressInfo } from "node:net";
import { serve } from "@hono/node-server";
import { realScheduler, type Scheduler } from "@openma/time";
import { createScriptedModelApp, type RecordedRequest, ScriptedModelCore } from "./app.ts";
import type { UnusedTurn } from "./queue.ts";
import type { FaultInput, ScriptInput } from "./script.ts";

export interface ScriptedModelOptions {
  script?: ScriptInput;
  /** 0 (default) picks a free port. */
  port?: number;
  host?: string;
  /** When set, requests must present it as `x-api-key` or `Authorization: Bearer`. */
  apiKey?: string;
  /** Time source for scripted delays (default: real timers). */
  scheduler?: Scheduler;
}

export interface ScriptedModel {
  /** Base URL for `new Anthropic({baseURL})`. */
  url: string;
  /** Every request received on `/v1/messages`, live. */
  requests: RecordedRequest[];
  /** Replace the script (turn usage starts over; the request log and queued faults stay). */
  load(script: ScriptInput): void;
  /** Queue a one-shot fault for the next request it matches. */
  inject(fault: FaultInput): void;
  /** Turns not used up yet. */
  unusedTurns(): UnusedTurn[];
  /** Resolves when no request is being handled, so a test can read settled state without polling. */
  idle(): Promise<void>;
  close(): Promise<void>;
}

export async function startScriptedModel(opts: ScriptedModelOptions = {}): Promise<ScriptedModel> {
  const core = new ScriptedModelCore(opts.script ?? [], opts.scheduler ?? realScheduler, opts.apiKey);
  const app = createScriptedModelApp(core);
  const host = opts.host ?? "127.0.0.1";
  const server = serve({ fetch: app.fetch, port: opts.port ?? 0, hostname: host });
  await new Promise<void>((resolve, reject) => {
    server.once("listening", resolve);
    server.once("error", reject);
  });
  const { port } = server.address() as AddressInfo;
  const urlHost = host.includes(":") ? `[${host}]` : host;
  let closing: Promise<void> | null = null;
  return {
    url: `http://${urlHost}:${port}`,
    requests: core.requests,
    load: (script) => core.load(script),
    inject: (fault) => core.inject(fault),
    unusedTurns: () => core.state.unused(),
    idle: () => core.idle(),
    close() {
      closing ??= new Promise<void>((resolve) => {
        for (const ctrl of core.inFlight) ctrl.abort(new Error("scripted model closed"));
        server.close(() => resolve());
        (server as unknown as { closeAllConnections?: () => void }).closeAllConnections?.();
      });
      return closing;
    },
  };
}
