import { describe, expect, it } from "vitest";
import { cronProblem, latestOccurrence, upcomingOccurrences } from "./cron.ts";
import { dueOccurrence } from "./scheduler.ts";

const t = (iso: string) => Date.parse(iso);
const utc = (expression: string) => ({ expression, timezone: "UTC" });

describe("cron", () => {
  it("accepts 5-field POSIX expressions only", () => {
    for (const e of ["* * * * *", "0 9 * * 1-5", "*/15 0-6 1,15 * 7", "0 0 1 1 0"]) expect(cronProblem(utc(e)), e).toBeNull();
    expect(cronProblem(utc("* * * *"))).toMatch(/5 fields/);
    expect(cronProblem(utc("0 * * * * *"))).toMatch(/5 fields/);
    expect(cronProblem(utc("@hourly"))).toMatch(/5 fields/);
    for (const e of ["0 0 L * *", "0 0 * * 1#2", "0 0 15W * *", "0 0 ? * *", "0 0 * JAN *"])
      expect(cronProblem(utc(e)), e).toMatch(/unsupported/);
    expect(cronProblem(utc("60 * * * *"))).toMatch(/expression/);
    expect(cronProblem({ expression: "* * * * *", timezone: "Nowhere/City" })).toMatch(/timezone/);
  });

  it("finds the newest occurrence at or before an instant, and the next ones after it", () => {
    const s = utc("*/5 * * * *");
    expect(latestOccurrence(s, t("2026-01-01T00:05:00.000Z"))).toBe(t("2026-01-01T00:05:00.000Z"));
    expect(latestOccurrence(s, t("2026-01-01T00:04:59.999Z"))).toBe(t("2026-01-01T00:00:00.000Z"));
    expect(upcomingOccurrences(s, t("2026-01-01T00:05:00.000Z"), 2)).toEqual([
      t("2026-01-01T00:10:00.000Z"),
      t("2026-01-01T00:15:00.000Z"),
    ]);
    // Wall-clock matching in the schedule's timezone.
    expect(upcomingOccurrences({ expression: "0 9 * * *", timezone: "Asia/Tokyo" }, t("2026-01-01T00:00:00.000Z"), 1)).toEqual([
      t("2026-01-01T00:00:00.000Z") + 24 * 3600_000,
    ]);
  });

  it("fires only the newest missed occurrence, never one at or before the anchor or the last fired", () => {
    const row = {
      schedule_expression: "* * * * *",
      schedule_timezone: "UTC",
      schedule_anchor_ms: t("2026-01-01T00:00:30.000Z"),
      last_scheduled_ms: null,
    };
    expect(dueOccurrence(row, t("2026-01-01T00:00:59.000Z"))).toBeNull();
    expect(dueOccurrence(row, t("2026-01-01T00:01:00.000Z"))).toBe(t("2026-01-01T00:01:00.000Z"));
    expect(dueOccurrence(row, t("2026-01-01T03:00:10.000Z"))).toBe(t("2026-01-01T03:00:00.000Z"));
    expect(dueOccurrence({ ...row, last_scheduled_ms: t("2026-01-01T03:00:00.000Z") }, t("2026-01-01T03:00:59.000Z"))).toBeNull();
    expect(dueOccurrence({ ...row, schedule_expression: null }, t("2026-01-01T03:00:59.000Z"))).toBeNull();
  });
});
