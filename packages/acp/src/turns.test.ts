import { describe, expect, it } from "vitest";
import type { CanonicalEvent } from "./recovery-prompt.ts";
import { pendingTurn } from "./turns.ts";

const msg = (id: string, text = id): CanonicalEvent => ({ id, type: "user.message", content: [{ type: "text", text }] });
const ev = (id: string, type: string): CanonicalEvent => ({ id, type });
const ids = (events: CanonicalEvent[] | undefined) => events?.map((e) => e.id);

describe("pendingTurn", () => {
  it("every message after the last finished turn, named by the last one; the prompt joins their text", () => {
    const log = [msg("m1"), ev("r", "session.status_running"), ev("i1", "session.status_idle"), msg("m2", "two"), msg("m3", "three")];
    const turn = pendingTurn(log);
    expect(turn).toMatchObject({ turnId: "m3", fromIndex: 3, lastIndex: 4, prompt: "two\n\nthree" });
    expect(ids(turn?.history)).toEqual(["m1", "r", "i1"]);
  });

  it("nothing after the last finished turn: no turn", () => {
    expect(pendingTurn([msg("m1"), ev("r", "session.status_running"), ev("i1", "session.status_idle")])).toBeNull();
    expect(pendingTurn([])).toBeNull();
  });

  it("a crashed turn (its running, no idle) took nothing: its input is pending again", () => {
    const log = [
      msg("m1"),
      ev("r1", "session.status_running"),
      ev("i1", "session.status_idle"),
      msg("m2"),
      ev("r2", "session.status_running"),
    ];
    expect(pendingTurn(log)).toMatchObject({ turnId: "m2", fromIndex: 3 });
  });

  it("a message sent while a turn ran (after its running, before its idle) gets a turn of its own", () => {
    const log = [msg("m1"), ev("r", "session.status_running"), msg("m2"), ev("a", "agent.message"), ev("i1", "session.status_idle")];
    const turn = pendingTurn(log);
    expect(turn).toMatchObject({ turnId: "m2", fromIndex: 2, lastIndex: 2 });
    // The history keeps the finished turn whole (its idle included): the canonical watermark is m1's turn.
    expect(ids(turn?.history)).toEqual(["m1", "r", "a", "i1"]);
    const served = [...log, ev("r2", "session.status_running"), ev("i2", "session.status_idle")];
    expect(pendingTurn(served)).toBeNull();
  });

  it("a placement that served index n: only later messages, before the turn's idle is back", () => {
    const log = [msg("m1"), ev("r", "session.status_running"), msg("m2")];
    expect(pendingTurn(log, 0)?.turnId).toBe("m2");
    expect(pendingTurn(log, 2)).toBeNull();
  });
});
