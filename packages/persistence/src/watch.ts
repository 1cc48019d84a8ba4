/**
 * Session outputs, `watch_and_upload`: for long work, poll the outputs
 * directory and upload each file once it has looked identical in two
 * consecutive scans (same inode, size, mtime and ctime to the nanosecond), so
 * deliverables become durable progressively instead of only at the end.
 * `finalize` then produces exactly the `final_collect` manifest, reusing every
 * upload whose file is still that version and reading only what changed.
 * Time comes from an injected scheduler, so tests drive scans by hand.
 */
import type { BlobStore } from "@openma/storage/blobs";
import type { Issue } from "./issues.ts";
import { toIssue } from "./issues.ts";
import {
  type CollectOptions,
  type CollectResult,
  type CollectStats,
  collectOutputs,
  DEFAULT_OUTPUT_LIMITS,
  listOutputs,
  type OutputEntry,
  type OutputLimits,
  OutputUploader,
} from "./outputs.ts";
import { type FileStamp, sameStamp } from "./walk.ts";

/** Runs `task` after `delayMs`; returns a cancel function. */
export interface Scheduler {
  schedule(delayMs: number, task: () => Promise<void>): () => void;
}

/** Real timers for production; unref'd so a watcher never keeps a process alive on its own. */
export const timerScheduler: Scheduler = {
  schedule(delayMs, task) {
    const t = setTimeout(() => void task(), delayMs);
    t.unref?.();
    return () => clearTimeout(t);
  },
};

/** A scheduler tests advance explicitly: no wall-clock waits. */
export class ManualScheduler implements Scheduler {
  private queue: Array<{ delayMs: number; task: () => Promise<void>; cancelled: boolean }> = [];

  schedule(delayMs: number, task: () => Promise<void>): () => void {
    const item = { delayMs, task, cancelled: false };
    this.queue.push(item);
    return () => {
      item.cancelled = true;
    };
  }

  get pending(): number {
    return this.queue.filter((i) => !i.cancelled).length;
  }

  /** Runs every task due now (and awaits it); tasks they schedule wait for the next call. */
  async runDue(): Promise<number> {
    const due = this.queue.filter((i) => !i.cancelled);
    this.queue = [];
    for (const item of due) await item.task();
    return due.length;
  }
}

export interface WatchOptions extends Omit<CollectOptions, "reuse" | "onRefusal"> {
  scheduler?: Scheduler;
  intervalMs?: number;
  /** Reports failures of background scans (the next scan still runs). */
  onError?: (err: Issue) => void;
}

export interface ScanReport {
  uploaded: string[];
  /** Seen for the first time or changed since the last scan: uploaded once stable. */
  pending: string[];
  /** Refusals seen in this scan; `finalize` decides whether they fail the collection. */
  refused: Issue[];
}

interface Tracked {
  lastSeen: FileStamp;
  uploaded?: { stamp: FileStamp; entry: OutputEntry };
}

export class OutputWatcher {
  /** Blob traffic of background scans (finalize reports its own). */
  get stats(): CollectStats {
    return this.uploader.stats;
  }

  private readonly tracked = new Map<string, Tracked>();
  private readonly limits: OutputLimits;
  private cancel: (() => void) | null = null;
  private running: Promise<unknown> = Promise.resolve();
  private stopped = false;
  private readonly uploader: OutputUploader;

  constructor(
    private readonly store: BlobStore,
    private readonly dir: string,
    private readonly opts: WatchOptions = {},
  ) {
    this.limits = { ...DEFAULT_OUTPUT_LIMITS, ...opts.limits };
    this.uploader = new OutputUploader(store);
  }

  /** Starts periodic scans. */
  start(): void {
    if (this.cancel || this.stopped) return;
    this.arm();
  }

  private arm(): void {
    const scheduler = this.opts.scheduler ?? timerScheduler;
    this.cancel = scheduler.schedule(this.opts.intervalMs ?? 5_000, async () => {
      try {
        await this.scan();
      } catch (err) {
        this.opts.onError?.(toIssue(err, "unreadable"));
      }
      if (!this.stopped) this.arm();
    });
  }

  /** One poll. Scans never overlap: each waits for the previous one. */
  scan(): Promise<ScanReport> {
    const next = this.running.then(() => this.scanOnce());
    this.running = next.catch(() => undefined);
    return next;
  }

  private async scanOnce(): Promise<ScanReport> {
    const listed = await listOutputs(this.dir, this.limits);
    const report: ScanReport = { uploaded: [], pending: [], refused: [...listed.issues] };
    const present = new Set(listed.files.map((f) => f.path));
    for (const path of this.tracked.keys()) if (!present.has(path)) this.tracked.delete(path);
    for (const file of listed.files) {
      const t = this.tracked.get(file.path);
      if (t?.uploaded && sameStamp(t.uploaded.stamp, file.stamp)) continue;
      if (!t || !sameStamp(t.lastSeen, file.stamp)) {
        this.tracked.set(file.path, { lastSeen: file.stamp, ...(t?.uploaded ? { uploaded: t.uploaded } : {}) });
        report.pending.push(file.path);
        continue;
      }
      try {
        const entry = await this.uploader.upload(listed.root, file, this.opts);
        t.uploaded = { stamp: file.stamp, entry };
        report.uploaded.push(file.path);
      } catch (err) {
        // Changed under the reader or unreadable: try again once it settles.
        report.refused.push(toIssue(err, "unreadable", file.path));
        this.tracked.delete(file.path);
      }
    }
    return report;
  }

  /** Stops polling and writes the final manifest (same format as `collectOutputs`). */
  async finalize(opts: Pick<CollectOptions, "onRefusal"> = {}): Promise<CollectResult> {
    this.stopped = true;
    this.cancel?.();
    this.cancel = null;
    await this.running;
    return collectOutputs(this.store, this.dir, {
      ...this.opts,
      ...opts,
      reuse: (path, stamp) => {
        const up = this.tracked.get(path)?.uploaded;
        return up && sameStamp(up.stamp, stamp) ? up.entry : undefined;
      },
    });
  }
}
