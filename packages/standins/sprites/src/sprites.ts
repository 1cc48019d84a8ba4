/**
 * The Sprites a stand-in holds: name, labels and a real local box each, and
 * the platform's automatic sleep. A Sprite idle for `warmAfterMs` goes warm
 * (the box is paused: processes frozen, memory kept); idle for `coldAfterMs`
 * more it goes cold (the box is stopped: processes end, the filesystem
 * stays). Any request to it wakes it first. A running command keeps it
 * awake, as on the platform.
 */
import { randomUUID } from "node:crypto";
import { type Box, KeyedLocks, type LocalBoxes } from "@openma/standin-kit";
import type { Scheduler } from "@openma/time";

export type SpriteStatus = "cold" | "warm" | "running";

export interface SpriteRecord {
  id: string;
  name: string;
  labels: string[];
  box: Box;
  createdAt: Date;
  updatedAt: Date;
  lastRunningAt: Date;
  /** Commands running now (they keep the Sprite awake). */
  active: number;
  /** Cancels the pending sleep timer. */
  idle: AbortController | null;
}

export interface SleepPolicy {
  warmAfterMs: number;
  coldAfterMs: number;
}

export const DEFAULT_SLEEP: SleepPolicy = { warmAfterMs: 30_000, coldAfterMs: 5 * 60_000 };

export class SpriteTable {
  readonly #sprites = new Map<string, SpriteRecord>();
  /** Serializes lifecycle changes per Sprite (a wake racing a sleep). */
  readonly #locks = new KeyedLocks();

  constructor(
    private readonly boxes: LocalBoxes,
    private readonly scheduler: Scheduler,
    private readonly sleep: SleepPolicy,
  ) {}

  get(name: string): SpriteRecord | undefined {
    return this.#sprites.get(name);
  }

  all(): SpriteRecord[] {
    return [...this.#sprites.values()].sort((a, b) => (a.name < b.name ? -1 : 1));
  }

  status(sprite: SpriteRecord): SpriteStatus {
    return sprite.box.state === "running" ? "running" : sprite.box.state === "paused" ? "warm" : "cold";
  }

  async create(name: string, labels: string[]): Promise<SpriteRecord> {
    const box = await this.boxes.create("sprite-");
    const now = new Date(this.scheduler.now());
    const sprite: SpriteRecord = {
      id: `sprite-${randomUUID()}`,
      name,
      labels,
      box,
      createdAt: now,
      updatedAt: now,
      lastRunningAt: now,
      active: 0,
      idle: null,
    };
    this.#sprites.set(name, sprite);
    this.#arm(sprite);
    return sprite;
  }

  async destroy(sprite: SpriteRecord): Promise<void> {
    this.#sprites.delete(sprite.name);
    sprite.idle?.abort();
    await this.boxes.destroy(sprite.box);
  }

  #locked<T>(sprite: SpriteRecord, work: () => Promise<T>): Promise<T> {
    return this.#locks.run(sprite.name, work);
  }

  /** A request reached the Sprite: wake it (warm: unpause, cold: start) and restart its idle clock. */
  async wake(sprite: SpriteRecord): Promise<void> {
    sprite.idle?.abort();
    sprite.idle = null;
    await this.#locked(sprite, async () => {
      if (sprite.box.state !== "running") await this.boxes.start(sprite.box);
      sprite.lastRunningAt = new Date(this.scheduler.now());
    });
    if (sprite.active === 0) this.#arm(sprite);
  }

  /** A command started (the Sprite stays up until it ends). */
  begin(sprite: SpriteRecord): void {
    sprite.active++;
    sprite.idle?.abort();
    sprite.idle = null;
  }

  end(sprite: SpriteRecord): void {
    sprite.active = Math.max(0, sprite.active - 1);
    if (sprite.active === 0 && this.#sprites.get(sprite.name) === sprite) this.#arm(sprite);
  }

  /** Puts a Sprite to sleep now, as its idle timers would (tests and the admin surface). */
  hibernate(sprite: SpriteRecord, to: "warm" | "cold"): Promise<void> {
    sprite.idle?.abort();
    sprite.idle = null;
    return this.#locked(sprite, async () => {
      if (to === "warm") await this.boxes.pause(sprite.box);
      else await this.boxes.stop(sprite.box);
    });
  }

  #arm(sprite: SpriteRecord): void {
    const idle = new AbortController();
    sprite.idle = idle;
    void (async () => {
      await this.scheduler.sleep(this.sleep.warmAfterMs, idle.signal);
      if (sprite.active > 0 || !this.#sprites.has(sprite.name)) return;
      await this.#locked(sprite, () => this.boxes.pause(sprite.box));
      await this.scheduler.sleep(this.sleep.coldAfterMs, idle.signal);
      if (sprite.active > 0 || !this.#sprites.has(sprite.name)) return;
      await this.#locked(sprite, () => this.boxes.stop(sprite.box));
    })().catch(() => {
      // Cancelled by activity, or the box went away: nothing to do.
    });
  }

  close(): void {
    for (const sprite of this.#sprites.values()) sprite.idle?.abort();
  }
}

export function spriteJson(table: SpriteTable, sprite: SpriteRecord, baseUrl: string): Record<string, unknown> {
  return {
    id: sprite.id,
    name: sprite.name,
    organization: "standin",
    status: table.status(sprite),
    url: `${baseUrl}/sprite-url/${sprite.name}`,
    url_settings: { auth: "sprite" },
    created_at: sprite.createdAt.toISOString(),
    updated_at: sprite.updatedAt.toISOString(),
    last_running_at: sprite.lastRunningAt.toISOString(),
    labels: sprite.labels,
  };
}
