/** Injected time source so tests never depend on wall-clock sleeps. */
export interface Clock {
  now(): number;
}

export const systemClock: Clock = { now: () => Date.now() };

export function toIso(ms: number): string {
  return new Date(ms).toISOString();
}

/** A clock tests move by hand. */
export class ManualClock implements Clock {
  constructor(private current = Date.parse("2026-01-01T00:00:00.000Z")) {}
  now(): number {
    return this.current;
  }
  advance(ms: number): void {
    this.current += ms;
  }
}
