/** The planner on hand-built logs: what the loop does next, and when a session needs no turn. */
import { describe, expect, it } from "vitest";
import { type LoggedEvent, scanLog } from "./log.ts";
import { DENIED_BY_USER, type PlanContext, planStep, SANDBOX_FREE_REFUSAL } from "./plan.ts";
import type { ServerToolExecutor } from "./server-tools.ts";

/** A log under construction: `add` returns the new event's id. */
function log() {
  const events: LoggedEvent[] = [];
  return {
    events,
    add(type: string, body: Record<string, unknown> = {}): string {
      const seq = events.length + 1;
      const id = `sevt_${seq}`;
      events.push({ seq, id, type, body: { id, type, ...body } });
      return id;
    },
  };
}

const cloud: PlanContext = { envType: "cloud", archived: false, agent: {}, executors: [] };
const plan = (l: ReturnType<typeof log>, ctx: PlanContext = cloud) => planStep(scanLog(l.events), ctx);
const idle = (reason: Record<string, unknown>) => ({ stop_reason: reason, stop_details: null });

describe("planStep", () => {
  it("does nothing for a fresh session and calls the model for a user message", () => {
    const l = log();
    expect(plan(l)).toEqual({ kind: "settled", outcome: { type: "idle", stopReason: "end_turn" } });
    l.add("user.message", { content: [{ type: "text", text: "hi" }] });
    expect(plan(l)).toEqual({ kind: "call_model" });
  });

  it("keeps calling the model after a failed attempt, and stops once retries are exhausted", () => {
    const l = log();
    l.add("user.message");
    l.add("session.status_running");
    const start = l.add("span.model_request_start");
    l.add("span.model_request_end", { model_request_start_id: start, is_error: true });
    l.add("session.status_rescheduled");
    expect(plan(l)).toEqual({ kind: "call_model" });
    l.add("session.status_idle", idle({ type: "retries_exhausted" }));
    expect(plan(l)).toEqual({ kind: "settled", outcome: { type: "idle", stopReason: "retries_exhausted" } });
  });

  it("settles a finished turn and idles a running one that has nothing left to do", () => {
    const l = log();
    l.add("user.message");
    l.add("session.status_running");
    l.add("agent.message");
    l.add("span.model_request_end", { is_error: false });
    expect(plan(l)).toMatchObject({ kind: "idle", stopReason: { type: "end_turn" }, outcome: { type: "idle", stopReason: "end_turn" } });
    l.add("session.status_idle", idle({ type: "end_turn" }));
    expect(plan(l)).toEqual({ kind: "settled", outcome: { type: "idle", stopReason: "end_turn" } });
  });

  it("runs an allowed sandbox tool, then calls the model with its result", () => {
    const l = log();
    l.add("user.message");
    const use = l.add("agent.tool_use", { name: "bash", input: { command: "ls" }, evaluated_permission: "allow" });
    l.add("span.model_request_end", { is_error: false });
    expect(plan(l)).toMatchObject({ kind: "act", toolUse: { id: use, name: "bash" }, action: { type: "sandbox" } });
    l.add("agent.tool_result", { tool_use_id: use, content: [] });
    expect(plan(l)).toEqual({ kind: "call_model" });
  });

  it("blocks on custom tools and confirmations, and re-emits requires_action when the set shrinks", () => {
    const l = log();
    l.add("user.message");
    const custom = l.add("agent.custom_tool_use", { name: "lookup", input: {} });
    const ask = l.add("agent.tool_use", { name: "bash", input: {}, evaluated_permission: "ask" });
    l.add("span.model_request_end", { is_error: false });
    const first = plan(l);
    expect(first).toMatchObject({ kind: "idle", stopReason: { type: "requires_action", event_ids: [custom, ask] } });
    l.add("session.status_idle", idle({ type: "requires_action", event_ids: [custom, ask] }));
    expect(plan(l)).toEqual({ kind: "settled", outcome: { type: "idle", stopReason: "requires_action" } });
    // A user message while blocked is kept for later; nothing to do yet.
    l.add("user.message");
    expect(plan(l)).toEqual({ kind: "settled", outcome: { type: "idle", stopReason: "requires_action" } });
    l.add("user.custom_tool_result", { custom_tool_use_id: custom, content: [] });
    const second = plan(l);
    expect(second).toMatchObject({ kind: "idle", stopReason: { type: "requires_action", event_ids: [ask] } });
    expect(second.kind === "idle" && first.kind === "idle" && second.dedupeKey !== first.dedupeKey).toBe(true);
    l.add("user.tool_confirmation", { tool_use_id: ask, result: "deny" });
    expect(plan(l)).toMatchObject({ kind: "act", toolUse: { id: ask }, action: { type: "refuse", message: DENIED_BY_USER } });
  });

  it("waits for the worker's hands on self-hosted environments, also after a confirmation allows the call", () => {
    const l = log();
    l.add("user.message");
    const use = l.add("agent.tool_use", { name: "read", input: {}, evaluated_permission: "ask" });
    const hosted = { ...cloud, envType: "self_hosted" };
    expect(plan(l, hosted)).toMatchObject({ kind: "idle", outcome: { type: "idle", stopReason: "requires_action" } });
    l.add("user.tool_confirmation", { tool_use_id: use, result: "allow" });
    expect(plan(l, hosted)).toMatchObject({ kind: "idle", outcome: { type: "waiting_for_hands" }, stopReason: { event_ids: [use] } });
    l.add("user.tool_result", { tool_use_id: use, content: [] });
    expect(plan(l, hosted)).toEqual({ kind: "call_model" });
  });

  it("calls the model with a worker's result logged just before the requires_action idle the loop appended late", () => {
    // Under load the worker answers between the loop's read of the log and its append of the requires_action idle
    // (bench/load.ts found it: the turn ended end_turn without the model seeing the result).
    const l = log();
    l.add("user.message");
    const use = l.add("agent.tool_use", { name: "bash", input: {}, evaluated_permission: "allow" });
    l.add("span.model_request_end", { is_error: false });
    l.add("user.tool_result", { tool_use_id: use, content: [] });
    l.add("session.status_idle", idle({ type: "requires_action", event_ids: [use] }));
    expect(plan(l, { ...cloud, envType: "self_hosted" })).toEqual({ kind: "call_model" });
  });

  it("refuses sandbox tools in sandbox-free sessions and unknown tools anywhere, but routes server tools", () => {
    const web: ServerToolExecutor = {
      id: "web_fetch",
      listTools: async () => [],
      handles: (n) => n === "web_fetch",
      execute: async () => ({ content: [], isError: false }),
    };
    const l = log();
    l.add("user.message");
    l.add("agent.tool_use", { name: "bash", input: {}, evaluated_permission: "allow" });
    expect(plan(l, { ...cloud, envType: "none" })).toMatchObject({ action: { type: "refuse", message: SANDBOX_FREE_REFUSAL } });
    const l2 = log();
    l2.add("user.message");
    l2.add("agent.tool_use", { name: "web_fetch", input: {}, evaluated_permission: "allow" });
    expect(plan(l2, { ...cloud, envType: "none", executors: [web] })).toMatchObject({ action: { type: "server", executor: web } });
    expect(plan(l2)).toMatchObject({ action: { type: "refuse", message: 'tool "web_fetch" is not available in this session' } });
    const l3 = log();
    l3.add("user.message");
    l3.add("agent.mcp_tool_use", { name: "q", input: {}, mcp_server_name: "gone", evaluated_permission: "allow" });
    expect(plan(l3)).toMatchObject({ action: { type: "refuse", message: 'MCP server "gone" is not available' } });
  });

  it("an interrupt abandons outstanding calls and idles; a late result is history, not input", () => {
    const l = log();
    l.add("user.message");
    l.add("session.status_running");
    const use = l.add("agent.tool_use", { name: "bash", input: {}, evaluated_permission: "ask" });
    l.add("session.status_idle", idle({ type: "requires_action", event_ids: [use] }));
    l.add("user.interrupt");
    expect(plan(l)).toMatchObject({ kind: "idle", stopReason: { type: "end_turn" }, outcome: { type: "interrupted" } });
    l.add("session.status_idle", idle({ type: "end_turn" }));
    expect(plan(l)).toEqual({ kind: "settled", outcome: { type: "idle", stopReason: "end_turn" } });
    l.add("user.tool_result", { tool_use_id: use, content: [] });
    expect(plan(l)).toEqual({ kind: "settled", outcome: { type: "idle", stopReason: "end_turn" } });
    l.add("user.message");
    expect(plan(l)).toEqual({ kind: "call_model" });
  });

  it("an interrupt during a model request idles without calling the model again", () => {
    const l = log();
    l.add("user.message");
    l.add("session.status_running");
    l.add("span.model_request_start");
    l.add("user.interrupt");
    expect(plan(l)).toMatchObject({ kind: "idle", outcome: { type: "interrupted" } });
    // An interrupt sent together with a new message: the message is answered.
    l.add("user.message");
    expect(plan(l)).toEqual({ kind: "call_model" });
  });

  it("never runs a terminated or archived session", () => {
    const l = log();
    l.add("user.message");
    expect(plan(l, { ...cloud, archived: true })).toEqual({ kind: "terminated" });
    l.add("session.status_terminated");
    expect(plan(l)).toEqual({ kind: "terminated" });
  });
});
