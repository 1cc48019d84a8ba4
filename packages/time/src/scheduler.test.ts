/** The manual scheduler tests use to drive scripted delays. */
import { describe, expect, it } from "vitest";
import { ManualScheduler, realScheduler } from "./scheduler.ts";

describe("ManualScheduler", () => {
  it("wakes sleeps in due order only when time reaches them", async () => {
    const s = new ManualScheduler(1000);
    const woke: string[] = [];
    const a = s.sleep(30).then(() => woke.push("a"));
    const b = s.sleep(10).then(() => woke.push("b"));
    expect(s.pending).toEqual([30, 10]);
    s.advance(9);
    await Promise.resolve();
    expect(woke).toEqual([]);
    s.advance(21);
    await Promise.all([a, b]);
    expect(woke).toEqual(["b", "a"]);
    expect(s.now()).toBe(1030);
    expect(s.pending).toEqual([]);
  });

  it("rejects and forgets a sleep whose signal aborts", async () => {
    const s = new ManualScheduler();
    const ctrl = new AbortController();
    const p = s.sleep(100, ctrl.signal);
    ctrl.abort(new Error("gone"));
    await expect(p).rejects.toThrow("gone");
    expect(s.pending).toEqual([]);
    await expect(s.sleep(1, ctrl.signal)).rejects.toThrow("gone");
  });

  it("signals when the wanted number of sleeps is waiting", async () => {
    const s = new ManualScheduler();
    const two = s.untilSleeping(2);
    let reached = false;
    void two.then(() => {
      reached = true;
    });
    void s.sleep(5);
    await Promise.resolve();
    expect(reached).toBe(false);
    void s.sleep(5);
    await two;
    expect(reached).toBe(true);
    expect(() => s.advance(-1)).toThrow(RangeError);
  });
});

describe("realScheduler", () => {
  it("rejects at once when aborted", async () => {
    const ctrl = new AbortController();
    const p = realScheduler.sleep(60_000, ctrl.signal);
    ctrl.abort(new Error("stop"));
    await expect(p).rejects.toThrow("stop");
  });
});
