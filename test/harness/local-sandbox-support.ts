/**
 * What the `openma serve` local-sandbox tests (bubblewrap and Docker) share:
 * the scripted model turn that asks for `bash`, `write` and `read`; the real
 * server with the brain on and one embedded sandbox driver; and one user
 * message observed on the session's SSE stream until the session is idle
 * (completion comes from the stream, never from waiting on time).
 */
import type Anthropic from "@anthropic-ai/sdk";
import { type ScriptedModel, type ScriptInput, startScriptedModel } from "@openma/scripted-model";
import type { Dialect } from "@openma/storage";
import { startTestServer, type TestServer } from "../support/server.ts";

const MODEL_KEY = "sk-scripted-local-sandbox";

export type Event = { type: string; id: string; [k: string]: unknown };

/**
 * The model answers a message containing "sandbox" with `bash` running `command`, then writes `written` to
 * /workspace/notes.txt, then reads it back by its relative path, then ends the turn.
 */
export function toolTurnScript(command: string, written: string): ScriptInput {
  return [
    {
      match: { last_user_text_contains: "sandbox" },
      response: { content: [{ type: "tool_use" as const, name: "bash", input: { command } }] },
    },
    {
      match: { tool_result_for: "bash" },
      response: {
        content: [{ type: "tool_use" as const, name: "write", input: { file_path: "/workspace/notes.txt", content: written } }],
      },
    },
    {
      match: { tool_result_for: "write" },
      response: { content: [{ type: "tool_use" as const, name: "read", input: { file_path: "notes.txt" } }] },
    },
    { match: { tool_result_for: "read" }, response: "Done." },
  ].map((turn) => ({ ...turn, times: 100 }));
}

/** The text of a tool result's content blocks. */
export const resultText = (result: Event | undefined) =>
  ((result?.content as Array<{ text?: string }> | undefined) ?? []).map((block) => block.text ?? "").join("");

export interface LocalSandboxServer {
  t: TestServer;
  /** A new session of a new agent with the whole toolset, always allowed, in a new cloud environment. */
  createToolsetSession(agentName: string): Promise<string>;
  /** Sends `text` as a user message and returns the session's events from then on, up to its next idle. */
  sendUntilIdle(sessionId: string, text: string): Promise<Event[]>;
  close(): Promise<void>;
}

/** The scripted model and a real server whose brain runs turns in `sandbox`, on `dialect`. */
export async function startLocalSandboxServer(
  dialect: Dialect,
  sandbox: "bubblewrap" | "docker",
  script: ScriptInput,
  /** More server configuration (tracing, metrics). */
  env: Record<string, string> = {},
): Promise<LocalSandboxServer> {
  const model: ScriptedModel = await startScriptedModel({ apiKey: MODEL_KEY, script });
  try {
    const t = await startTestServer(dialect, {
      OPENMA_BRAIN: "on",
      OPENMA_SANDBOX: sandbox,
      OPENMA_MODEL_BASE_URL: model.url,
      OPENMA_MODEL_API_KEY: MODEL_KEY,
      OPENMA_EXECUTION_POLL_MS: "600000", // bus wake-ups only
      ...env,
    });
    return {
      t,
      createToolsetSession: (agentName) => createToolsetSession(t.client, agentName),
      sendUntilIdle: (sessionId, text) => sendUntilIdle(t.client, sessionId, text),
      close: async () => {
        await t.close();
        await model.close();
      },
    };
  } catch (err) {
    await model.close();
    throw err;
  }
}

async function createToolsetSession(client: Anthropic, agentName: string): Promise<string> {
  const env = (await client.beta.environments.create({ name: "cloud" })).id;
  const agent = await client.beta.agents.create({
    name: agentName,
    model: "claude-test-1",
    tools: [{ type: "agent_toolset_20260401", default_config: { permission_policy: { type: "always_allow" } } }],
  });
  return (await client.beta.sessions.create({ agent: agent.id, environment_id: env })).id;
}

async function sendUntilIdle(client: Anthropic, sessionId: string, text: string): Promise<Event[]> {
  // The stream opens before the send, so no event of the turn can slip past it.
  const stream = await client.beta.sessions.events.stream(sessionId);
  await client.beta.sessions.events.send(sessionId, { events: [{ type: "user.message", content: [{ type: "text", text }] }] });
  const events: Event[] = [];
  try {
    for await (const event of stream) {
      events.push(event as unknown as Event);
      if (event.type === "session.status_idle") break;
    }
  } finally {
    stream.controller.abort();
  }
  return events;
}
