/**
 * `startScriptedModel`: the scripted model APIs on a real HTTP port, for each
 * vendor's official SDK (or an agent) to reach by its base URL.
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
  /** When set, requests must present it the way their API does (x-api-key or Bearer; Bearer; x-goog-api-key or ?key=). */
  apiKey?: string;
  /** Time source for scripted delays (default: real timers). */
  scheduler?: Scheduler;
}

export interface ScriptedModel {
  /** Base URL for `new Anthropic({baseURL})` and Gemini's `httpOptions.baseUrl`. */
  url: string;
  /** The base URL each vendor's client expects (OpenAI's ends in /v1). */
  baseUrls: Record<"anthropic" | "openai" | "gemini", string>;
  /** Every conversation turn request received, in any dialect, live. */
  requests: RecordedRequest[];
  /** Side requests (titles, classifiers, probes: see side.ts) and token counts, live. */
  sideRequests: RecordedRequest[];
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
  const url = `http://${urlHost}:${port}`;
  let closing: Promise<void> | null = null;
  return {
    url,
    baseUrls: { anthropic: url, openai: `${url}/v1`, gemini: url },
    requests: core.requests,
    sideRequests: core.sideRequests,
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
