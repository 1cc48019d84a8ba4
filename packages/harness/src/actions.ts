/**
 * Settles one outstanding tool use on the server side: runs a sandbox tool
 * through the session's ToolSandboxPort, runs a server tool (MCP, web_fetch)
 * through its executor, or records a refusal (a denied confirmation, a
 * sandbox tool in a sandbox-free session, an unknown tool).
 *
 * The result event carries the dedupe key `result:<tool use id>`, so it is
 * recorded once. The tool itself runs at least once: a crash after it ran
 * and before its result landed runs it again on the next attempt.
 */
import { appendToSession, draft } from "./append.ts";
import { type SessionContext, serverToolContext } from "./context.ts";
import type { LogState, ToolUseRecord } from "./log.ts";
import type { Action, TurnOutcome } from "./plan.ts";
import { redactOutcome } from "./redaction.ts";
import { SessionCredentials } from "./server-tools/vault-credentials.ts";
import { isDescribedError, type ServerToolResult } from "./server-tools.ts";
import { exposedNameFor } from "./tools.ts";
import { runSandboxTool } from "./toolset/index.ts";
import type { TurnRunnerDeps } from "./turn.ts";
import { addServerToolUse, usageEventFields } from "./usage.ts";
import { TurnWatch } from "./watch.ts";

type Content = ServerToolResult["content"];
type Outcome = { content: Content; isError: boolean; sessionError?: Record<string, unknown> | undefined };

function errorText(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

async function execute(
  deps: TurnRunnerDeps,
  ctx: SessionContext,
  state: LogState,
  toolUse: ToolUseRecord,
  action: Action,
  signal: AbortSignal,
): Promise<Outcome> {
  if (action.type === "refuse") return { content: [{ type: "text", text: action.message }], isError: true };
  if (action.type === "server") {
    const toolCtx = serverToolContext(deps, ctx);
    try {
      const name = await exposedNameFor(action.executor, toolCtx, toolUse.name);
      return await action.executor.execute({ name, input: toolUse.input, toolUseId: toolUse.id }, toolCtx, signal);
    } catch (err) {
      const content: Content = [{ type: "text", text: `${toolUse.name}: ${errorText(err)}` }];
      // The next call reconnects, hence "retrying"; the model sees the failure as the call's result.
      return { content, isError: true, sessionError: isDescribedError(err) ? err.toSessionError("retrying") : undefined };
    }
  }
  let resolution: Awaited<ReturnType<typeof deps.sandboxes.resolve>>;
  try {
    resolution = await deps.sandboxes.resolve({
      sessionId: ctx.sessionId,
      environmentId: ctx.environmentId,
      environment: ctx.environment,
      signal,
    });
  } catch (err) {
    resolution = { type: "unavailable", reason: `the session's sandbox could not be acquired: ${errorText(err)}` };
  }
  if (resolution.type === "unavailable")
    return {
      content: [{ type: "text", text: `${toolUse.name}: ${resolution.reason}` }],
      isError: true,
      sessionError: resolution.sessionError,
    };
  // Whether an earlier `bash` call ran (perhaps in another process or sandbox): a fresh shell must then say so.
  const priorBashCalls = state.toolUses.some(
    (u) => u.kind === "tool" && u.name === "bash" && u.seq < toolUse.seq && state.results.has(u.id),
  );
  const out = await runSandboxTool(resolution.port, toolUse.name, toolUse.input, signal, { priorBashCalls });
  return { content: [{ type: "text", text: out.text }], isError: out.isError };
}

/** The outcome with the secrets of the session's vaults redacted; loaded per result, so a rotated secret is known. */
async function redacted(deps: TurnRunnerDeps, ctx: SessionContext, outcome: Outcome): Promise<Outcome> {
  if (ctx.vaultIds.length === 0) return outcome;
  const credentials = await SessionCredentials.load(deps.storage, ctx.vaultIds, { secrets: deps.secrets });
  return redactOutcome(credentials.redactor, outcome);
}

/** Returns the turn's outcome when it ends here, or null to plan the next step. */
export async function actStep(
  deps: TurnRunnerDeps,
  ctx: SessionContext,
  state: LogState,
  toolUse: ToolUseRecord,
  action: Action,
  signal: AbortSignal,
): Promise<TurnOutcome | null> {
  const watch = new TurnWatch(deps.storage, ctx.sessionId, state.lastSeq, signal);
  let result: Outcome;
  try {
    result = await execute(deps, ctx, state, toolUse, action, watch.signal);
  } finally {
    watch.close();
  }
  if (watch.reason === "outer") return { type: "interrupted" };
  if (watch.reason === "terminated") return { type: "failed", error: "the session was terminated during the turn" };
  // No result is logged with a vault secret in it, whichever tool produced it (a sandbox's upstream may echo one).
  result = await redacted(deps, ctx, result);
  // After a user interrupt the result (usually "aborted") is still recorded: it is what happened to the call.
  // The Messages API refuses empty text blocks.
  const nonEmpty = result.content.filter((c) => c.type !== "text" || c.text !== "");
  const content = nonEmpty.length ? nonEmpty : [{ type: "text" as const, text: "(no output)" }];
  const fields =
    toolUse.kind === "mcp"
      ? { mcp_tool_use_id: toolUse.id, content, is_error: result.isError }
      : { tool_use_id: toolUse.id, content, is_error: result.isError };
  const type = toolUse.kind === "mcp" ? "agent.mcp_tool_result" : "agent.tool_result";
  const drafts = [draft(type, fields, `result:${toolUse.id}`)];
  if (result.sessionError) drafts.unshift(draft("session.error", { error: result.sessionError }, `error:${toolUse.id}`));
  const counter = action.type === "server" ? action.executor.usageCounter : undefined;
  if (counter) {
    // The request was made (whatever it returned): counted and priced with the result, in the same append.
    const usage = await usageEventFields(deps, ctx, state, addServerToolUse(state.usage, counter));
    drafts.push(draft("session.usage", usage, `usage:${toolUse.id}`));
  }
  const landed = await appendToSession(deps, ctx.sessionId, drafts);
  if (landed.type === "terminated") return { type: "failed", error: "the session was terminated during the turn" };
  return null;
}
