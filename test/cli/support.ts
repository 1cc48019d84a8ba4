/** What the CLI tests share: in-process stdio for the client commands, and a server whose brain runs the scripted model. */
import { PassThrough, Writable } from "node:stream";
import { type ManualScheduler, type ScriptInput, startScriptedModel } from "@openma/scripted-model";
import type { Dialect } from "@openma/storage";
import type { CliIo } from "../../apps/openma/src/cli/client.ts";
import { startTestServer, type TestServer } from "../support/server.ts";

const MODEL_KEY = "sk-scripted-cli";

export interface CapturedIo extends CliIo {
  out(): string;
  err(): string;
}

function sink(chunks: string[], isTTY: boolean): Writable & { isTTY: boolean } {
  const stream = new Writable({
    write(chunk, _encoding, done) {
      chunks.push(String(chunk));
      done();
    },
  });
  return Object.assign(stream, { isTTY });
}

export function captureIo(env: Record<string, string>, opts: { tty?: boolean } = {}): CapturedIo {
  const out: string[] = [];
  const err: string[] = [];
  return {
    stdout: sink(out, opts.tty === true),
    stderr: sink(err, false),
    stdin: new PassThrough(),
    env,
    out: () => out.join(""),
    err: () => err.join(""),
  };
}

/** The real server with its brain on: the scripted model answers, tools run in bubblewrap sandboxes. */
export async function startBrainServer(
  script: ScriptInput,
  scheduler?: ManualScheduler,
  opts: { dialect?: Dialect; env?: Record<string, string> } = {},
) {
  const model = await startScriptedModel({ apiKey: MODEL_KEY, script, ...(scheduler ? { scheduler } : {}) });
  const t = await startTestServer(opts.dialect ?? "sqlite", {
    ...opts.env,
    OPENMA_BRAIN: "on",
    OPENMA_SANDBOX: "bubblewrap",
    OPENMA_MODEL_BASE_URL: model.url,
    OPENMA_MODEL_API_KEY: MODEL_KEY,
    OPENMA_EXECUTION_POLL_MS: "600000", // bus wake-ups only
  });
  return {
    t,
    async close() {
      await t.close();
      await model.close();
    },
  };
}

/** An agent with the built-in tools under `policy`, and a cloud environment. */
export async function agentAndEnvironment(t: TestServer, policy: "always_ask" | "always_allow") {
  const agent = await t.client.beta.agents.create({
    name: `agent-${policy}`,
    model: "claude-test-1",
    tools: [{ type: "agent_toolset_20260401", default_config: { permission_policy: { type: policy } } }],
  });
  const environment = await t.client.beta.environments.create({ name: `env-${policy}`, config: { type: "cloud" } as never });
  return { agentId: agent.id, environmentId: environment.id };
}
