/**
 * The standalone entry (`apps/openma/src/scripted-model-cli.ts`) in its own
 * process: driven over HTTP only, and killed with SIGKILL mid-stream the way
 * crash tests will do it.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { once } from "node:events";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import Anthropic, { APIError } from "@anthropic-ai/sdk";
import { GoogleGenAI } from "@google/genai";
import OpenAI from "openai";
import { afterEach, describe, expect, it } from "vitest";
import type { ScriptInput } from "./index.ts";

const CLI = fileURLToPath(new URL("../../../apps/openma/src/scripted-model-cli.ts", import.meta.url));
const KEY = "sk-cli-test";
const children: ChildProcess[] = [];
const dirs: string[] = [];

afterEach(async () => {
  for (const child of children.splice(0)) if (child.exitCode === null && child.signalCode === null) child.kill("SIGKILL");
  for (const dir of dirs.splice(0)) await rm(dir, { recursive: true, force: true });
});

/** Start the CLI and read the URL it prints first. */
async function spawnCli(script: ScriptInput): Promise<{ child: ChildProcess; url: string }> {
  const dir = await mkdtemp(join(tmpdir(), "scripted-model-"));
  dirs.push(dir);
  const file = join(dir, "script.json");
  await writeFile(file, JSON.stringify(script));
  const child = spawn(process.execPath, ["--import", "tsx", CLI, "--script", file, "--port", "0", "--api-key", KEY], {
    stdio: ["ignore", "pipe", "pipe"],
  });
  children.push(child);
  let stderr = "";
  child.stderr!.on("data", (c: Buffer) => {
    stderr += c.toString();
  });
  const lines = createInterface({ input: child.stdout! });
  const exited = once(child, "exit").then(() => {
    throw new Error(`scripted-model-cli exited early: ${stderr}`);
  });
  const [url] = (await Promise.race([once(lines, "line"), exited])) as [string];
  return { child, url };
}

const ask = { model: "claude-test-1", max_tokens: 64, messages: [{ role: "user" as const, content: "hi" }] };

describe("scripted-model-cli", () => {
  it("serves a script file and takes faults over HTTP", async () => {
    const { child, url } = await spawnCli([{ times: 2, response: "from the cli" }]);
    expect(url).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
    const client = new Anthropic({ baseURL: url, apiKey: KEY, maxRetries: 0 });
    expect((await client.messages.create(ask)).content).toEqual([expect.objectContaining({ text: "from the cli" })]);
    const injected = await fetch(`${url}/_script/inject`, {
      method: "POST",
      headers: { "content-type": "application/json", "x-api-key": KEY },
      body: JSON.stringify({ type: "error", status: 529 }),
    });
    expect(injected.status).toBe(200);
    const err = await client.messages.create(ask).catch((e: unknown) => e);
    expect((err as APIError).status).toBe(529);
    const log = (await (await fetch(`${url}/_script/requests`, { headers: { "x-api-key": KEY } })).json()) as {
      data: { status: number }[];
    };
    expect(log.data.map((r) => r.status)).toEqual([200, 529]);
    child.kill("SIGTERM");
    const [code] = await once(child, "exit");
    expect(code).toBe(0);
  });

  it("serves every dialect from one script on one port", async () => {
    const { child, url } = await spawnCli([{ times: 4, response: "same answer" }]);
    const anthropic = new Anthropic({ baseURL: url, apiKey: KEY, maxRetries: 0 });
    const openai = new OpenAI({ baseURL: `${url}/v1`, apiKey: KEY, maxRetries: 0 });
    const gemini = new GoogleGenAI({ apiKey: KEY, httpOptions: { baseUrl: url, apiVersion: "v1beta" } });
    const texts = [
      (await anthropic.messages.stream(ask).finalMessage()).content.map((b) => (b.type === "text" ? b.text : "")).join(""),
      (await openai.responses.stream({ model: "gpt-test", input: "hi" }).finalResponse()).output_text,
      (await openai.chat.completions.create({ model: "gpt-test", messages: [{ role: "user", content: "hi" }] })).choices[0]!.message
        .content,
      (await gemini.models.generateContent({ model: "gemini-test", contents: "hi" })).text,
    ];
    expect(texts).toEqual(Array(4).fill("same answer"));
    const log = (await (await fetch(`${url}/_script/requests`, { headers: { "x-api-key": KEY } })).json()) as {
      data: { dialect: string; turn: number }[];
    };
    expect(log.data.map((r) => [r.dialect, r.turn])).toEqual([
      ["anthropic", 0],
      ["openai-responses", 0],
      ["openai-chat", 0],
      ["gemini", 0],
    ]);
    child.kill("SIGTERM");
    await once(child, "exit");
  });

  it("leaves the client with a broken stream when killed with SIGKILL mid-stream", async () => {
    // A long per-chunk delay parks the server between events; the test acts on the first event, not on time.
    const { child, url } = await spawnCli([{ delay: { chunk_ms: 600_000 }, response: "never completes" }]);
    const client = new Anthropic({ baseURL: url, apiKey: KEY, maxRetries: 0 });
    const stream = client.messages.stream(ask);
    const firstEvent = new Promise<string>((resolve) => stream.once("streamEvent", (e) => resolve(e.type)));
    const ended = stream.finalMessage().catch((e: unknown) => e);
    expect(await firstEvent).toBe("message_start");
    child.kill("SIGKILL");
    const [, signal] = await once(child, "exit");
    expect(signal).toBe("SIGKILL");
    const err = await ended;
    expect(err).toBeInstanceOf(Error);
    expect(err).not.toBeInstanceOf(APIError);
  });

  it("refuses an invalid script file with a message naming the field", async () => {
    await expect(spawnCli([{ response: { content: [{ type: "tool_use", name: "bash" }] } }] as unknown as ScriptInput)).rejects.toThrow(
      /turns\.0\.response\.content\.0\.input/,
    );
  });
});
