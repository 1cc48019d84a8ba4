/**
 * `/metrics` of a real `openma serve` (SQLite, brain on, bubblewrap
 * sandboxes) scraped while a session runs against the scripted model: the
 * turn, model, sandbox, SSE and HTTP series move, labelled by route pattern
 * and driver, and no session id ever becomes a label. Progress is observed on
 * the SSE stream, never by waiting on time.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type Event, type LocalSandboxServer, startLocalSandboxServer, toolTurnScript } from "../harness/local-sandbox-support.ts";
import { sample, scrape, total } from "./scrape.ts";

describe("/metrics during a session (bubblewrap, scripted model)", () => {
  let s: LocalSandboxServer;
  beforeAll(async () => {
    s = await startLocalSandboxServer("sqlite", "bubblewrap", toolTurnScript("echo metered", "notes"));
  });
  afterAll(async () => {
    await s?.close();
  });

  it("moves the turn, model and sandbox series, with bounded labels", async () => {
    const { client, baseURL, apiKey } = s.t;
    const sessionId = await s.createToolsetSession("metered");
    const before = await scrape(baseURL, apiKey);
    expect(sample(before, "openma_turns_running")).toBe(0);
    expect(total(before, "openma_model_request_duration_seconds_count")).toBe(0);

    const stream = await client.beta.sessions.events.stream(sessionId);
    await client.beta.sessions.events.send(sessionId, {
      events: [{ type: "user.message", content: [{ type: "text", text: "use the sandbox" }] }],
    });
    let during = "";
    const seen: Event[] = [];
    try {
      for await (const event of stream) {
        seen.push(event as unknown as Event);
        // The bash result is in the log; three more model calls follow, so the turn is still running.
        if (event.type === "agent.tool_result" && during === "") during = await scrape(baseURL, apiKey);
        if (event.type === "session.status_idle") break;
      }
    } finally {
      stream.controller.abort();
    }
    expect(seen.filter((e) => e.type === "session.error")).toEqual([]);

    expect(sample(during, "openma_turns_running")).toBe(1);
    expect(sample(during, "openma_sse_subscribers")).toBe(1);
    expect(sample(during, "openma_execution_queue_sessions", { state: "running" })).toBe(1);
    expect(sample(during, "openma_model_request_duration_seconds_count", { outcome: "response" })).toBeGreaterThanOrEqual(1);
    expect(
      sample(during, "openma_sandbox_operation_duration_seconds_count", {
        driver: "bubblewrap",
        operation: "acquire",
        outcome: "acquired",
      }),
    ).toBe(1);
    expect(
      sample(during, "openma_sandbox_operation_duration_seconds_count", { driver: "bubblewrap", operation: "spawn", outcome: "started" }),
    ).toBe(1);

    const after = await scrape(baseURL, apiKey);
    // bash, write and read, then the final answer: four model requests, every one counted with its tokens.
    expect(sample(after, "openma_model_request_duration_seconds_count", { outcome: "response" })).toBe(4);
    expect(sample(after, "openma_model_tokens_total", { type: "output" })).toBeGreaterThan(0);
    expect(sample(after, "openma_model_tokens_total", { type: "input" })).toBeGreaterThan(
      sample(during, "openma_model_tokens_total", { type: "input" }),
    );
    expect(sample(after, "openma_event_append_duration_seconds_count")).toBe(1);
    // Requests are labelled by route pattern: the session id is in no series at all.
    expect(sample(after, "openma_http_requests_total", { method: "POST", route: "/v1/sessions/:session_id/events", status: "200" })).toBe(
      1,
    );
    expect(after).not.toContain(sessionId);
    expect(after).toContain("openma_process_cpu_seconds_total");
  });
});
