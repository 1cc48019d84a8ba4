/**
 * Outcomes through the harness against the scripted model, on both backends:
 * `user.define_outcome` (text and file rubrics), the evaluation loop with its
 * `span.outcome_evaluation_*` events, the session's `outcome_evaluations`,
 * and every verdict: satisfied, needs_revision (then satisfied),
 * max_iterations_reached, failed and interrupted.
 */
import { toFile } from "@anthropic-ai/sdk";
import type { BetaManagedAgentsOutcomeEvaluationResource } from "@anthropic-ai/sdk/resources/beta/sessions/sessions";
import type { ModelPort } from "@openma/harness";
import { BACKENDS } from "@openma/storage/testing";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type Harness, ofType, startHarness } from "./support.ts";

const grader = (task: string, result: string, explanation: string) => ({
  match: { system_matches: "outcome grader", last_user_text_contains: task },
  response: JSON.stringify({ result, explanation }),
});
const agentSays = (contains: string, text: string) => ({
  match: { system_matches: "test agent", last_user_text_contains: contains },
  response: text,
});

describe.each(BACKENDS)("outcomes on %s", (dialect) => {
  let h: Harness;
  let agent: string;
  let env: string;
  beforeAll(async () => {
    h = await startHarness(dialect, [
      agentSays("alpha-task", "alpha done"),
      grader("alpha-task", "satisfied", "the file rubric is met"),
      agentSays("beta-task", "beta draft"),
      grader("beta-task", "needs_revision", "add the missing detail"),
      agentSays("add the missing detail", "beta final"),
      grader("beta-task", "satisfied", "now complete"),
      agentSays("gamma-task", "gamma attempt"),
      grader("gamma-task", "needs_revision", "still short"),
      agentSays("no revisions remain", "acknowledged"),
      agentSays("delta-task", "delta output"),
      grader("delta-task", "failed", "the rubric does not apply"),
      agentSays("epsilon-task", "epsilon output"),
    ]);
    agent = await h.agent([]);
    env = await h.environment("cloud");
  });
  afterAll(async () => h?.close());

  async function outcome(
    task: string,
    rubric: { type: "text"; content: string } | { type: "file"; file_id: string },
    maxIterations?: number,
  ) {
    const created = await h.t.client.beta.sessions.create({
      agent,
      environment_id: env,
      initial_events: [
        { type: "user.define_outcome", description: task, rubric, ...(maxIterations ? { max_iterations: maxIterations } : {}) },
      ],
    });
    expect(created.outcome_evaluations).toMatchObject([{ result: "pending", iteration: 0 }]);
    return created.id;
  }

  const evaluations = async (sessionId: string): Promise<BetaManagedAgentsOutcomeEvaluationResource[]> =>
    (await h.t.client.beta.sessions.retrieve(sessionId)).outcome_evaluations;
  const verdicts = async (sessionId: string) =>
    ofType(await h.events(sessionId), "span.outcome_evaluation_end").map((e) => [e.iteration, e.result]);

  it("satisfied: the grader reads the file rubric and the agent's work, and the session idles", async () => {
    const file = await h.t.client.beta.files.upload({ file: await toFile(Buffer.from("must mention alpha"), "rubric.md") });
    const sessionId = await outcome("alpha-task", { type: "file", file_id: file.id });
    expect(await h.run(sessionId)).toEqual({ type: "idle", stopReason: "end_turn" });
    const events = await h.events(sessionId);
    expect(events.map((e) => e.type)).toEqual([
      "user.define_outcome",
      "session.status_running",
      "span.model_request_start",
      "agent.message",
      "span.model_request_end",
      "session.usage",
      "span.outcome_evaluation_start",
      "span.outcome_evaluation_end",
      "session.usage",
      "session.status_idle",
    ]);
    const start = ofType(events, "span.outcome_evaluation_start")[0];
    expect(ofType(events, "span.outcome_evaluation_end")[0]).toMatchObject({
      outcome_evaluation_start_id: start?.id,
      iteration: 0,
      result: "satisfied",
      explanation: "the file rubric is met",
      usage: { input_tokens: expect.any(Number), output_tokens: expect.any(Number) },
    });
    const graderRequest = h.model.requests.find(
      (r) => JSON.stringify(r.body).includes("outcome grader") && JSON.stringify(r.body).includes("alpha-task"),
    );
    expect(JSON.stringify(graderRequest?.body)).toContain("must mention alpha");
    expect(JSON.stringify(graderRequest?.body)).toContain("alpha done");
    const [evaluation] = await evaluations(sessionId);
    expect(evaluation).toMatchObject({
      type: "outcome_evaluation",
      result: "satisfied",
      iteration: 0,
      explanation: "the file rubric is met",
    });
    expect(evaluation?.completed_at).toEqual(expect.any(String));
  });

  it("needs_revision sends the verdict back to the agent, and the next evaluation is satisfied", async () => {
    const sessionId = await outcome("beta-task", { type: "text", content: "detailed" });
    expect(await h.run(sessionId)).toEqual({ type: "idle", stopReason: "end_turn" });
    expect(await verdicts(sessionId)).toEqual([
      [0, "needs_revision"],
      [1, "satisfied"],
    ]);
    expect(ofType(await h.events(sessionId), "agent.message").map((e) => e.content)).toEqual([
      [{ type: "text", text: "beta draft" }],
      [{ type: "text", text: "beta final" }],
    ]);
    expect(await evaluations(sessionId)).toMatchObject([{ result: "satisfied", iteration: 1, explanation: "now complete" }]);
  });

  it("max_iterations_reached after the last allowed iteration, then one acknowledgment turn", async () => {
    const sessionId = await outcome("gamma-task", { type: "text", content: "long" }, 1);
    expect(await h.run(sessionId)).toEqual({ type: "idle", stopReason: "end_turn" });
    expect(await verdicts(sessionId)).toEqual([[0, "max_iterations_reached"]]);
    expect(ofType(await h.events(sessionId), "agent.message").at(-1)?.content).toEqual([{ type: "text", text: "acknowledged" }]);
    expect(await evaluations(sessionId)).toMatchObject([{ result: "max_iterations_reached", explanation: "still short" }]);
  });

  it("failed when the grader finds the rubric does not apply", async () => {
    const sessionId = await outcome("delta-task", { type: "text", content: "n/a" });
    expect(await h.run(sessionId)).toEqual({ type: "idle", stopReason: "end_turn" });
    expect(await verdicts(sessionId)).toEqual([[0, "failed"]]);
    expect(await evaluations(sessionId)).toMatchObject([{ result: "failed", explanation: "the rubric does not apply" }]);
  });

  it("interrupted when the user interrupts while the grader runs", async () => {
    const sessionId = await outcome("epsilon-task", { type: "text", content: "x" });
    // The grader call waits until the interrupt aborts it, as a slow grader would.
    const slowGrader: ModelPort = {
      retry: h.deps.model.retry,
      send: async (request, signal) => {
        if (!request.system?.includes("outcome grader")) return h.deps.model.send(request, signal);
        await h.t.client.beta.sessions.events.send(sessionId, { events: [{ type: "user.interrupt" }] });
        if (!signal.aborted) await new Promise<void>((resolve) => signal.addEventListener("abort", () => resolve(), { once: true }));
        return { type: "aborted" };
      },
    };
    expect(await h.run(sessionId, { model: slowGrader })).toEqual({ type: "interrupted" });
    expect(await verdicts(sessionId)).toEqual([[0, "interrupted"]]);
    expect((await h.events(sessionId)).at(-1)).toMatchObject({ type: "session.status_idle" });
    expect(await evaluations(sessionId)).toMatchObject([{ result: "interrupted", iteration: 0 }]);
    expect(await h.needsTurn(sessionId)).toBe(false);
  });
});
