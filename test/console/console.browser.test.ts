/**
 * The console in real Chromium (Debian's `chromium`, driven by
 * playwright-core) against a real server whose brain runs the scripted
 * model and bubblewrap sandboxes. Through the UI only: sign in with the API
 * key, create an agent (tools `always_ask`) and a cloud environment, start a
 * session, watch the tool call arrive live, approve it, see the final
 * message. The turn's end happens while the browser's connection is cut (a
 * proxy in between drops it and refuses reconnects): once the network is
 * back the timeline holds exactly the session's log, in order, each event
 * once. Also: a self-hosted environment's key shown once, a custom tool
 * answered from the page, a held turn interrupted. Every page passes
 * axe-core with no serious or critical violation.
 *
 * OPENMA_CONSOLE_SCREENSHOTS=1 (`npm run console:screenshots`) also writes
 * the main pages to docs/console/*.png.
 */
import { readFile } from "node:fs/promises";
import { createRequire } from "node:module";
import { join } from "node:path";
import { toFile } from "@anthropic-ai/sdk";
import { appendEvents } from "@openma/api";
import { ManualScheduler, type ScriptedModel, startScriptedModel } from "@openma/scripted-model";
import { newId, systemClock } from "@openma/storage";
import { type Browser, chromium, type Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startTestServer, type TestServer } from "../support/server.ts";
import { until } from "../support/until.ts";
import { type CutProxy, startCutProxy } from "./cut-proxy.ts";

const CHROMIUM = "/usr/bin/chromium";
const MODEL_KEY = "sk-scripted-console";
const SCREENSHOTS = process.env.OPENMA_CONSOLE_SCREENSHOTS ? join(import.meta.dirname, "..", "..", "docs", "console") : null;
const DELIVER = [
  "printf '# Summary\\nAll good.\\n' > /mnt/session/outputs/summary.md",
  "mkdir -p /workspace/src && printf 'main file\\n' > /workspace/src/main.txt && ln -sfn /etc /workspace/etc-link",
  "echo delivered",
].join(" && ");
const AXE_SCRIPT = createRequire(import.meta.url).resolve("axe-core/axe.min.js");

type Violation = { id: string; impact: string | null; help: string; nodes: Array<{ target: unknown }> };

/** axe-core's findings on the page as it is now, the serious and critical ones only (axe is in every document: see addInitScript). */
async function seriousViolations(page: Page): Promise<string[]> {
  const violations = await page.evaluate(
    async () => (await (window as unknown as { axe: { run(): Promise<{ violations: Violation[] }> } }).axe.run()).violations,
  );
  return violations
    .filter((v) => v.impact === "serious" || v.impact === "critical")
    .map((v) => `${v.id} (${v.impact}): ${v.help} at ${JSON.stringify(v.nodes.map((n) => n.target))}`);
}

/** `expect.poll` with a deadline for a loaded machine (the default second bounds nothing here). */
const poll = <T>(read: () => Promise<T>) => expect.poll(read, { timeout: 30_000 });

async function screenshot(page: Page, name: string): Promise<void> {
  if (SCREENSHOTS) await page.screenshot({ path: join(SCREENSHOTS, `${name}.png`), fullPage: true });
}

describe("the console in Chromium", () => {
  let clock: ManualScheduler;
  let model: ScriptedModel;
  let t: TestServer;
  let proxy: CutProxy;
  let browser: Browser;
  let page: Page;

  beforeAll(async () => {
    // Fails (never skips) when Chromium is missing: `npm run provision` installs it.
    browser = await chromium.launch({ executablePath: CHROMIUM, args: ["--no-sandbox"] });
    clock = new ManualScheduler();
    model = await startScriptedModel({
      apiKey: MODEL_KEY,
      scheduler: clock,
      script: [
        {
          match: { last_user_text_contains: "may I" },
          response: { content: [{ type: "tool_use", name: "bash", input: { command: "echo allowed" } }] },
        },
        // The answer after the tool waits for the test's clock: the turn is mid-way while the connection is cut.
        { match: { tool_result_for: "bash", tool_result_contains: "allowed" }, delay: { first_byte_ms: 60_000 }, response: "Ran it." },
        // A deliverable in the outputs directory and a file in the workspace, next to a link that must not be followed.
        {
          match: { last_user_text_contains: "deliver it" },
          response: { content: [{ type: "tool_use", name: "bash", input: { command: DELIVER } }] },
        },
        { match: { tool_result_for: "bash", tool_result_contains: "delivered" }, response: "Delivered." },
        // One frame per step of the test's clock: the message can be seen half-written.
        {
          match: { last_user_text_contains: "stream it" },
          delay: { chunk_ms: 60_000 },
          response: { content: [{ type: "text", text: "First half. Second half." }], chunk_chars: 12 },
        },
        // A custom tool: the console answers it with the result a person types.
        {
          match: { last_user_text_contains: "look it up" },
          response: { content: [{ type: "tool_use", name: "lookup", input: { q: "answer" } }] },
        },
        { match: { tool_result_for: "lookup", tool_result_contains: "42" }, response: "The answer is 42." },
        // Held by the test's clock, which it never advances for this one: the turn runs until it is interrupted.
        { match: { last_user_text_contains: "take your time" }, delay: { first_byte_ms: 600_000 }, response: "Too late." },
      ],
    });
    t = await startTestServer("sqlite", {
      OPENMA_BRAIN: "on",
      OPENMA_SANDBOX: "bubblewrap",
      OPENMA_MODEL_BASE_URL: model.url,
      OPENMA_MODEL_API_KEY: MODEL_KEY,
      OPENMA_EXECUTION_POLL_MS: "600000", // bus wake-ups only
    });
    proxy = await startCutProxy(t.baseURL);
    const context = await browser.newContext({ viewport: { width: 1280, height: 860 } });
    // Loaded with each document (the console is one page, so about once), not injected before every check.
    await context.addInitScript({ path: AXE_SCRIPT });
    page = await context.newPage();
  });
  afterAll(async () => {
    await browser?.close();
    await proxy?.close();
    await t?.close();
    await model?.close();
  });

  it("signs in, creates an agent and an environment, runs a session with an approved tool call, and survives a dropped stream", async () => {
    // The root URL leads to the console, which asks for the key once.
    await page.goto(`${proxy.url}/`);
    expect(new URL(page.url()).pathname).toBe("/console");
    await page.getByLabel("API key").fill(t.apiKey);
    expect(await seriousViolations(page)).toEqual([]);
    await screenshot(page, "sign-in");
    await page.getByRole("button", { name: "Sign in" }).click();
    await page.getByRole("heading", { name: "Sessions" }).waitFor();

    await page.getByRole("link", { name: "Agents" }).click();
    await page.getByLabel("Name").fill("reviewer");
    await page.getByLabel("Model").fill("claude-test-1");
    await page.getByLabel("Agent toolset").selectOption("always_ask");
    await page.getByRole("button", { name: "Create agent" }).click();
    await page.getByRole("cell", { name: "reviewer" }).waitFor();
    expect(await seriousViolations(page)).toEqual([]);
    await screenshot(page, "agents");

    await page.getByRole("link", { name: "Environments" }).click();
    await page.getByLabel("Name").fill("cloud-env");
    await page.getByLabel("Type").selectOption("cloud");
    await page.getByLabel("apt packages").fill("");
    await page.getByRole("button", { name: "Create environment" }).click();
    await page.getByRole("cell", { name: "cloud-env" }).waitFor();
    expect(await seriousViolations(page)).toEqual([]);
    await screenshot(page, "environments");
    const [environment] = (await t.client.beta.environments.list()).data;
    expect(environment).toMatchObject({ name: "cloud-env", config: { type: "cloud", networking: { type: "unrestricted" } } });

    await page.getByRole("link", { name: "Sessions" }).click();
    await page.getByLabel("Title").fill("console e2e");
    await page.getByRole("button", { name: "Start session" }).click();
    await page.getByRole("heading", { name: /console e2e/ }).waitFor();
    const sessionId = decodeURIComponent(new URL(page.url()).hash.split("/")[2] ?? "");
    expect(sessionId).toMatch(/^sesn_/);
    await page.getByRole("status").getByText("Live").waitFor();

    // The tool call shows up live, waiting for a confirmation.
    await page.getByLabel("Message").fill("may I run it?");
    await page.getByRole("button", { name: "Send" }).click();
    const toolUse = page.locator('[data-type="agent.tool_use"]');
    await toolUse.waitFor();
    await poll(() => toolUse.textContent()).toContain("echo allowed");
    await page.getByRole("button", { name: "Approve" }).waitFor();
    expect(await seriousViolations(page)).toEqual([]);
    await screenshot(page, "session-confirmation");
    await page.getByRole("button", { name: "Approve" }).click();

    // The tool ran; the model is answering (held by the test's clock). Now the network drops.
    await page.locator('[data-type="agent.tool_result"]').waitFor();
    await clock.untilSleeping(1);
    proxy.cut();
    await page.getByRole("status").getByText("Reconnecting…").waitFor();
    clock.advance(60_000);
    await until(async () => {
      const events = (await t.client.beta.sessions.events.list(sessionId)).data;
      return events.at(-1)?.type === "session.status_idle" && events.some((e) => e.type === "agent.message");
    }, "the turn to end while the browser is cut off");
    proxy.restore();

    // Back online: the events of the cut are there, every event of the log exactly once, in order.
    await page.locator('[data-type="agent.message"]').getByText("Ran it.").waitFor();
    await page.getByRole("status").getByText("Live").waitFor();
    const log = (await t.client.beta.sessions.events.list(sessionId, { limit: 1000 })).data.map((e) => e.id);
    await expect
      .poll(() => page.locator("[data-event-id]").evaluateAll((els) => els.map((e) => e.getAttribute("data-event-id"))))
      .toEqual(log);
    await poll(() => page.getByTestId("session-status").textContent()).toBe("idle");
    expect(await seriousViolations(page)).toEqual([]);
    await screenshot(page, "session");
    const approved = (await t.client.beta.sessions.events.list(sessionId, { limit: 1000 })).data.find(
      (e) => e.type === "user.tool_confirmation",
    );
    expect(approved).toMatchObject({ result: "allow" });
  });

  it("lists sessions by status, renders the conformance table and the resource lists accessibly, and downloads a file", async () => {
    await page.goto(`${proxy.url}/console#/sessions`);
    await page.getByRole("cell", { name: "console e2e" }).waitFor();
    await page.getByLabel("Status").selectOption("running");
    await page.getByText("No sessions.").waitFor();
    await page.getByLabel("Status").selectOption("idle");
    await page.getByRole("cell", { name: "console e2e" }).waitFor();
    expect(await seriousViolations(page)).toEqual([]);
    await screenshot(page, "sessions");

    // A session that does not exist: the API's refusal is shown, and the stream gives up instead of retrying.
    await page.goto(`${proxy.url}/console#/sessions/sesn_missing`);
    await page.getByRole("status").getByText("Stream ended").waitFor();
    await poll(() => page.getByRole("alert").textContent()).toContain("sesn_missing");

    await page.getByRole("link", { name: "Conformance" }).click();
    await page.getByRole("cell", { name: "bubblewrap", exact: true }).waitFor();
    expect(await seriousViolations(page)).toEqual([]);
    await screenshot(page, "conformance");

    // A file downloads through the browser (the key goes in a header, so the console fetches it).
    const content = "the deliverable\n";
    await t.client.beta.files.upload({ file: await toFile(Buffer.from(content), "report.txt") });
    await page.getByRole("navigation").getByRole("link", { name: "Files" }).click();
    await page.getByRole("cell", { name: "report.txt", exact: true }).waitFor();
    expect(await seriousViolations(page)).toEqual([]);
    const [download] = await Promise.all([
      page.waitForEvent("download"),
      page.getByRole("button", { name: "Download report.txt" }).click(),
    ]);
    expect(download.suggestedFilename()).toBe("report.txt");
    expect(await readFile(await download.path(), "utf8")).toBe(content);

    for (const name of ["Vaults", "Skills", "Memory stores"]) {
      await page.getByRole("navigation").getByRole("link", { name }).click();
      await page.getByRole("heading", { name, level: 1 }).waitFor();
      await page.getByText("None yet.").waitFor();
      expect(await seriousViolations(page)).toEqual([]);
    }
  });

  it("edits an agent into a new version and shows what changed in its history", async () => {
    await page.getByRole("navigation").getByRole("link", { name: "Agents" }).click();
    await page.getByRole("link", { name: "reviewer" }).click();
    await page.getByLabel("System prompt").fill("Answer in one line.");
    await page.getByRole("button", { name: "Save new version" }).click();
    await poll(() => page.getByTestId("agent-version").textContent()).toBe("2");
    const latest = page.locator('[data-version="2"]');
    await poll(() => latest.getByRole("row", { name: /system/ }).textContent()).toContain("Answer in one line.");
    await page.locator('[data-version="1"]').getByText("First version.").waitFor();
    expect(await seriousViolations(page)).toEqual([]);
    await screenshot(page, "agent-versions");
    const [agent] = (await t.client.beta.agents.list()).data;
    expect(agent).toMatchObject({ name: "reviewer", version: 2, system: "Answer in one line." });
  });

  it("shows an agent message while it is written, then the final event in its place", async () => {
    const agent = await t.client.beta.agents.create({ name: "writer", model: "claude-test-1" });
    const environment = await t.client.beta.environments.create({ name: "writer-env" });
    const session = await t.client.beta.sessions.create({ agent: agent.id, environment_id: environment.id, title: "streaming" });
    // Signed in whether or not the first test ran (the key lives in the browser's storage).
    await page.goto(`${proxy.url}/console`);
    await page.evaluate((key) => localStorage.setItem("openma.console.apiKey", key), t.apiKey);
    await page.goto(`${proxy.url}/console#/sessions/${session.id}`);
    await page.reload();
    await page.getByRole("status").getByText("Live").waitFor();
    await page.getByLabel("Message").fill("stream it");
    await page.getByRole("button", { name: "Send" }).click();
    const step = async (frames: number) => {
      for (let i = 0; i < frames; i++) {
        await clock.untilSleeping(1);
        clock.advance(60_000);
      }
    };
    // message_start goes out at once; then ping, the text block's start and its first delta, one per step.
    await step(3);
    const preview = page.locator("[data-preview-id]");
    await poll(() => preview.textContent()).toContain("First half.");
    const previewId = await preview.getAttribute("data-preview-id");
    expect(await page.locator('[data-type="agent.message"]').count()).toBe(0);
    // The second delta, the block's stop, message_delta, message_stop.
    await step(4);
    const final = page.locator('[data-type="agent.message"]');
    await poll(() => final.textContent()).toContain("First half. Second half.");
    expect(await final.getAttribute("data-event-id")).toBe(previewId);
    expect(await preview.count()).toBe(0);
  });
  /** Signed in (the key lives in the browser's storage) on `hash`, whoever ran before. */
  async function openSignedIn(hash: string): Promise<void> {
    await page.goto(`${proxy.url}/console`);
    await page.evaluate((key) => localStorage.setItem("openma.console.apiKey", key), t.apiKey);
    await page.goto(`${proxy.url}/console${hash}`);
    await page.reload();
  }

  it("downloads a deliverable from the session's outputs and browses its workspace", async () => {
    const agent = await t.client.beta.agents.create({
      name: "deliverer",
      model: "claude-test-1",
      tools: [{ type: "agent_toolset_20260401", default_config: { permission_policy: { type: "always_allow" } } }],
    });
    const environment = await t.client.beta.environments.create({ name: "deliver-env", config: { type: "cloud" } as never });
    const session = await t.client.beta.sessions.create({ agent: agent.id, environment_id: environment.id, title: "deliverables" });
    await openSignedIn(`#/sessions/${session.id}`);
    await page.getByRole("status").getByText("Live").waitFor();
    await page.getByLabel("Message").fill("deliver it");
    await page.getByRole("button", { name: "Send" }).click();
    await page.locator('[data-type="agent.message"]').getByText("Delivered.").waitFor();

    // The outputs list fills once the turn's outputs are collected (ADR 0023).
    const deliverable = page.getByRole("button", { name: "Download summary.md" });
    await deliverable.waitFor({ timeout: 30_000 });
    const [download] = await Promise.all([page.waitForEvent("download"), deliverable.click()]);
    expect(download.suggestedFilename()).toBe("summary.md");
    expect(await readFile(await download.path(), "utf8")).toBe("# Summary\nAll good.\n");

    // The workspace: into a folder, a file downloads; the symlink is listed, never followed.
    await page.getByRole("button", { name: "Open folder src" }).click();
    const workspaceFile = page.getByRole("button", { name: "Download src/main.txt from the workspace" });
    await workspaceFile.waitFor();
    expect(await seriousViolations(page)).toEqual([]);
    await screenshot(page, "session-outputs-workspace");
    const [fromWorkspace] = await Promise.all([page.waitForEvent("download"), workspaceFile.click()]);
    expect(fromWorkspace.suggestedFilename()).toBe("main.txt");
    expect(await readFile(await fromWorkspace.path(), "utf8")).toBe("main file\n");
    await page.getByRole("navigation", { name: "Workspace path" }).getByRole("button", { name: "/workspace" }).click();
    await page.locator('[data-workspace-path="etc-link"]').getByText("symbolic link, not followed").waitFor();
  });

  it("keeps a 10,000-event session's timeline to the rows in view", async () => {
    const agent = await t.client.beta.agents.create({ name: "chatty", model: "claude-test-1" });
    const environment = await t.client.beta.environments.create({ name: "chatty-env" });
    const session = await t.client.beta.sessions.create({ agent: agent.id, environment_id: environment.id, title: "long" });
    const deps = { storage: t.store.storage, clock: systemClock, ids: newId };
    for (let i = 0; i < 10_000; i += 1000) {
      const drafts = Array.from({ length: 1000 }, (_, j) => ({
        type: "agent.message",
        fields: { content: [{ type: "text", text: `line ${i + j}` }] },
        dedupeKey: null,
      }));
      await appendEvents(deps, session.id, drafts);
    }
    await openSignedIn(`#/sessions/${session.id}`);
    const list = page.locator("ol[data-total-events]");
    await poll(() => list.getAttribute("data-total-events")).toBe("10000");
    // It opens at the newest events, and only a window of rows is in the page.
    await page.locator("[data-event-id]").getByText("line 9999", { exact: true }).waitFor();
    const rendered = await page.locator("[data-event-id]").count();
    expect(rendered).toBeGreaterThan(0);
    expect(rendered).toBeLessThan(200);
    // Scrolled to the top, the first events are rendered instead, and still only a window.
    await page.getByRole("region", { name: "Session timeline" }).evaluate((el) => {
      el.scrollTop = 0;
    });
    await page.locator("[data-event-id]").getByText("line 0", { exact: true }).waitFor();
    expect(await page.locator("[data-event-id]").count()).toBeLessThan(200);
    expect(await page.locator("[data-event-id]").getByText("line 9999", { exact: true }).count()).toBe(0);
    expect(await seriousViolations(page)).toEqual([]);
  });

  it("creates a vault and a credential whose secret is never shown again, and shows each environment's runtime", async () => {
    const secret = "sk-console-secret-never-shown-0123";
    await openSignedIn("#/vaults");
    await page.getByLabel("Vault name").fill("team vault");
    await page.getByRole("button", { name: "Create vault" }).click();
    await page.getByRole("heading", { name: "Credentials of team vault" }).waitFor();
    await page.getByLabel("Display name").fill("deploy token");
    await page.getByLabel("Variable name").fill("DEPLOY_TOKEN");
    await page.getByLabel("Secret").fill(secret);
    await page.getByRole("button", { name: "Create credential" }).click();
    await page.getByRole("cell", { name: "deploy token" }).waitFor();
    await page.getByRole("status").getByText("never shown again").waitFor();
    expect(await page.getByLabel("Secret").inputValue()).toBe("");
    expect(await page.content()).not.toContain(secret);
    expect(await seriousViolations(page)).toEqual([]);
    await screenshot(page, "vaults");
    const [vault] = (await t.client.beta.vaults.list()).data;
    const [credential] = (await t.client.beta.vaults.credentials.list(vault!.id)).data;
    expect(credential).toMatchObject({ display_name: "deploy token", auth: { type: "environment_variable", secret_name: "DEPLOY_TOKEN" } });

    // The environment whose sessions ran here shows its sandbox driver from the stats endpoint.
    await page.getByRole("navigation").getByRole("link", { name: "Environments" }).click();
    await poll(() => page.getByTestId("runtime-deliver-env").textContent()).toMatch(
      /Sandbox driver bubblewrap \(.+\): \d+ running, \d+ idle/,
    );
    expect(await seriousViolations(page)).toEqual([]);
    await screenshot(page, "environments");
  });

  it("shows a self-hosted environment's key once, answers a custom tool call, and interrupts a turn", async () => {
    await openSignedIn("#/environments");
    await page.getByLabel("Name").fill("own-workers");
    await page.getByLabel("Type").selectOption("self_hosted");
    await page.getByRole("button", { name: "Create environment" }).click();
    await page.getByRole("cell", { name: "own-workers" }).waitFor();
    const key = (await page.getByTestId("environment-key").textContent()) ?? "";
    expect(key.length).toBeGreaterThan(16);
    expect(await seriousViolations(page)).toEqual([]);
    // The API never returns it again, and the console shows it no more once you leave the page.
    const created = (await t.client.beta.environments.list()).data.find((e) => e.name === "own-workers");
    expect(JSON.stringify(await t.client.beta.environments.retrieve(created?.id ?? ""))).not.toContain(key);
    await page.getByRole("navigation").getByRole("link", { name: "Sessions" }).click();
    await page.getByRole("navigation").getByRole("link", { name: "Environments" }).click();
    await page.getByRole("cell", { name: "own-workers" }).waitFor();
    expect(await page.getByTestId("environment-key").count()).toBe(0);
    expect(await page.content()).not.toContain(key);

    const agent = await t.client.beta.agents.create({
      name: "looker",
      model: "claude-test-1",
      tools: [{ type: "custom", name: "lookup", description: "Look a thing up.", input_schema: { type: "object", properties: {} } }],
    });
    const environment = await t.client.beta.environments.create({ name: "look-env" });
    const session = await t.client.beta.sessions.create({ agent: agent.id, environment_id: environment.id, title: "custom" });
    await openSignedIn(`#/sessions/${session.id}`);
    await page.getByRole("status").getByText("Live").waitFor();
    await page.getByLabel("Message").fill("look it up");
    await page.getByRole("button", { name: "Send" }).click();
    await page.getByLabel("Result for lookup").fill("42");
    expect(await seriousViolations(page)).toEqual([]);
    await page.getByRole("button", { name: "Send result" }).click();
    await page.locator('[data-type="agent.message"]').getByText("The answer is 42.").waitFor();
    const events = (await t.client.beta.sessions.events.list(session.id, { limit: 1000 })).data;
    const use = events.find((e) => e.type === "agent.custom_tool_use");
    expect(events).toContainEqual(
      expect.objectContaining({ type: "user.custom_tool_result", custom_tool_use_id: use?.id, content: [{ type: "text", text: "42" }] }),
    );

    // A turn the model holds: Interrupt ends it, and the timeline says so.
    await page.getByLabel("Message").fill("take your time");
    await page.getByRole("button", { name: "Send" }).click();
    await clock.untilSleeping(1);
    await poll(() => page.getByTestId("session-status").textContent()).toBe("running");
    await page.getByRole("button", { name: "Interrupt" }).click();
    await page.locator('[data-type="user.interrupt"]').getByText("You interrupted the agent").waitFor();
    await poll(() => page.getByTestId("session-status").textContent()).toBe("idle");
    const after = (await t.client.beta.sessions.events.list(session.id, { limit: 1000 })).data;
    expect(after.filter((e) => e.type === "user.interrupt")).toHaveLength(1);
    expect(after.some((e) => e.type === "agent.message" && JSON.stringify(e).includes("Too late."))).toBe(false);
  });
});
