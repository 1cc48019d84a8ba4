/**
 * The persistent `bash` shell end to end, through the official SDK on both
 * backends: `cd /tmp && export X=1` in one call, `pwd; echo $X` in the next
 * prints `/tmp` and `1`; a timed-out `sleep 1000` does not wedge the next
 * call; after the sandbox is replaced, the next call runs in a fresh shell
 * and its result says so (known from the log, so it holds in another server
 * process too).
 */
import type { BetaManagedAgentsSessionEvent } from "@anthropic-ai/sdk/resources/beta/sessions/events";
import { BACKENDS } from "@openma/storage/testing";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type Harness, startHarness, TOOLSET } from "./support.ts";

const bash = (match: Record<string, string>, input: Record<string, unknown>) => ({
  match,
  response: { content: [{ type: "tool_use" as const, name: "bash", input }] },
});
const say = (match: Record<string, string>, text: string) => ({ match, response: { content: [{ type: "text" as const, text }] } });

const SCRIPT = [
  bash({ last_user_text_contains: "use the shell" }, { command: "cd /tmp && export X=1 && echo step1" }),
  bash({ tool_result_contains: "step1" }, { command: "pwd; echo $X" }),
  bash({ tool_result_contains: "/tmp\n1" }, { command: "sleep 1000", timeout_ms: 300 }),
  bash({ tool_result_contains: "timed out" }, { command: "pwd; echo $X; echo step4" }),
  say({ tool_result_contains: "step4" }, "Shell checked."),
  bash({ last_user_text_contains: "once more" }, { command: 'pwd; echo "x=$X"' }),
  say({ tool_result_contains: "a new shell was started" }, "Fresh shell noted."),
];

function results(events: BetaManagedAgentsSessionEvent[]): Array<{ text: string; isError: boolean | null | undefined }> {
  const out: Array<{ text: string; isError: boolean | null | undefined }> = [];
  for (const e of events) {
    if (e.type !== "agent.tool_result") continue;
    const text = (e.content ?? []).map((c) => (c.type === "text" ? c.text : "")).join("");
    out.push({ text, isError: e.is_error });
  }
  return out;
}

describe.each(BACKENDS)("the persistent bash shell on %s", (dialect) => {
  let h: Harness;
  beforeAll(async () => {
    h = await startHarness(dialect, SCRIPT);
  });
  afterAll(async () => h?.close());

  it("keeps cwd and exported variables, survives a timeout, and reports a fresh shell after a sandbox replacement", async () => {
    const sessionId = await h.session(await h.agent([TOOLSET]), await h.environment("cloud"), "use the shell");
    expect(await h.run(sessionId)).toEqual({ type: "idle", stopReason: "end_turn" });
    const first = results(await h.events(sessionId));
    expect(first.slice(0, 2)).toEqual([
      { text: "step1", isError: false },
      { text: "/tmp\n1", isError: false },
    ]);
    expect(first[2]?.isError).toBe(true);
    expect(first[2]?.text).toMatch(/^bash: command timed out after 300 ms \(the command was killed; the shell/);
    expect(first[3]).toEqual({ text: "/tmp\n1\nstep4", isError: false });

    h.driver.replace(sessionId);
    await h.say(sessionId, "once more");
    expect(await h.run(sessionId)).toEqual({ type: "idle", stopReason: "end_turn" });
    const all = results(await h.events(sessionId));
    expect(all).toHaveLength(5);
    expect(all[4]).toEqual({
      text:
        "[bash: a new shell was started: the previous shell is gone (the sandbox was replaced or the server restarted); " +
        `it starts in the workspace directory, without earlier variables or background jobs]\n${h.driver.portFor(sessionId).workdir}\nx=`,
      isError: false,
    });
  });
});
