/**
 * 5-field POSIX cron schedules (minute hour day-of-month month day-of-week)
 * in an IANA timezone, evaluated by croner. The API accepts exactly what the
 * Managed Agents API documents: five fields, day-of-week 0-7 (0 and 7 are
 * Sunday), day-of-month and day-of-week OR-ed when both are restricted; no
 * seconds or year field, no L, W, #, ? and no @-shortcuts.
 */
import { Cron } from "croner";

export interface CronSchedule {
  expression: string;
  timezone: string;
}

const FIELD = /^[0-9*,/-]+$/;

/** Why `schedule` is not a usable schedule, or null when it is. */
export function cronProblem(schedule: CronSchedule): string | null {
  if (!validTimezone(schedule.timezone)) return `timezone: ${JSON.stringify(schedule.timezone)} is not an IANA timezone`;
  const fields = schedule.expression.trim().split(/\s+/);
  if (fields.length !== 5) return "expression: must have exactly 5 fields (minute hour day-of-month month day-of-week)";
  const bad = fields.find((f) => !FIELD.test(f));
  if (bad !== undefined) return `expression: field ${JSON.stringify(bad)} uses unsupported syntax (only digits, *, ',', '-' and '/')`;
  try {
    compile(schedule);
  } catch (err) {
    return `expression: ${(err as Error).message}`;
  }
  return null;
}

function validTimezone(tz: string): boolean {
  if (tz === "" || tz.length > 64) return false;
  try {
    new Intl.DateTimeFormat("en-US", { timeZone: tz });
    return true;
  } catch {
    return false;
  }
}

function compile(schedule: CronSchedule): Cron {
  return new Cron(schedule.expression.trim(), { timezone: schedule.timezone, mode: "5-part", paused: true });
}

/** The newest occurrence at or before `atMs`, or null when there is none. */
export function latestOccurrence(schedule: CronSchedule, atMs: number): number | null {
  // previousRuns looks before its reference at second precision: ask from one second later, keep the first at or before `atMs`.
  const runs = compile(schedule).previousRuns(2, new Date(atMs + 1000));
  const hit = runs.map((d) => d.getTime()).find((t) => t <= atMs);
  return hit ?? null;
}

/** Up to `n` occurrences strictly after `afterMs`. */
export function upcomingOccurrences(schedule: CronSchedule, afterMs: number, n = 5): number[] {
  return compile(schedule)
    .nextRuns(n, new Date(afterMs))
    .map((d) => d.getTime());
}
