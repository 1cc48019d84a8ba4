import { describe, expect, it } from "vitest";
import { pendingTurn, type SessionLogEvent, textOf } from "./turns.ts";

const msg = (id: string, text = id): SessionLogEvent => ({ id, type: "user.message", content: [{ type: "text", text }] });
const ev = (id: string, type: string): SessionLogEvent => ({ id, type });

describe("pendingTurn", () => {
  it("a placement's first turn: every message after the last idle, named by the last one", () => {
    const log = [msg("m1"), ev("r", "session.status_running"), ev("i1", "session.status_idle"), msg("m2"), msg("m3")];
    const turn = pendingTurn(log, -1);
    expect(turn).toMatchObject({ turnId: "m3", fromIndex: 3, lastIndex: 4 });
    expect(turn?.inputs.map((e) => textOf(e))).toEqual(["m2", "m3"]);
  });

  it("nothing after the last idle: no turn", () => {
    expect(pendingTurn([msg("m1"), ev("i1", "session.status_idle")], -1)).toBeNull();
    expect(pendingTurn([], -1)).toBeNull();
  });

  it("a crashed turn (its input, no idle after it) is pending again for the next placement", () => {
    const log = [msg("m1"), ev("i1", "session.status_idle"), msg("m2"), ev("r", "session.status_running")];
    expect(pendingTurn(log, -1)?.turnId).toBe("m2");
  });

  it("later turns: a message sent while a turn ran (before its idle) is served next", () => {
    const log = [msg("m1"), ev("r", "session.status_running"), msg("m2"), ev("i1", "session.status_idle")];
    expect(pendingTurn(log, 0)?.turnId).toBe("m2");
    expect(pendingTurn(log, 2)).toBeNull();
  });
});
