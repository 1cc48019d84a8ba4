/**
 * Delivers the webhook outbox. Each pass takes the due *head* of every
 * (endpoint, order key) queue — the oldest delivery not yet delivered or
 * dead-lettered — so one session's events reach an endpoint in order. A
 * delivery is claimed with a lease (a conditional update), so several
 * server processes share the outbox without sending one attempt twice; a
 * process that dies mid-attempt leaves a lease that expires and the delivery
 * is retried (receivers dedupe by `webhook-id`, the event id, which every
 * attempt repeats). A non-2xx answer, a timeout or a refused target is a
 * failed attempt: retried after base·2^(attempt-1) (capped) until
 * `maxAttempts`, then dead-lettered (state `dead`, logged, listed by the
 * API's endpoint deliveries). All times come from the injected clock; waits
 * from the injected scheduler.
 */
import http from "node:http";
import https from "node:https";
import { isIP } from "node:net";
import { isNonPublicAddress } from "@openma/egress/public-address";
import type { Database } from "@openma/storage";
import type { Scheduler } from "@openma/time";
import type { Kysely } from "kysely";
import { signDelivery } from "./signing.ts";
import { guardedLookup } from "./targets.ts";

export interface WebhookLogger {
  info(obj: object, msg?: string): void;
  warn(obj: object, msg?: string): void;
}

export interface DeliveryWorkerOptions {
  db: Kysely<Database>;
  clock: { now(): number };
  scheduler: Scheduler;
  logger: WebhookLogger;
  /** Operator switch: loopback, private and link-local targets allowed (and plain http). */
  allowPrivateTargets: boolean;
  maxAttempts?: number;
  baseDelayMs?: number;
  maxDelayMs?: number;
  /** Per-attempt HTTP timeout (wall time: it bounds a socket, not logic). */
  timeoutMs?: number;
  /** How long a claimed attempt is ours before another process may retry it. */
  leaseMs?: number;
  /** Pause between passes when nothing was due. */
  pollMs?: number;
  /** Heads taken per pass. */
  batch?: number;
}

export const DEFAULT_MAX_ATTEMPTS = 8;

export interface AttemptResult {
  ok: boolean;
  error?: string;
}

export class WebhookDeliveryWorker {
  readonly #o: Required<Omit<DeliveryWorkerOptions, "logger">> & { logger: WebhookLogger };
  #stop: AbortController | null = null;
  #loop: Promise<void> | null = null;

  constructor(opts: DeliveryWorkerOptions) {
    this.#o = {
      maxAttempts: DEFAULT_MAX_ATTEMPTS,
      baseDelayMs: 1_000,
      maxDelayMs: 3_600_000,
      timeoutMs: 10_000,
      leaseMs: 60_000,
      pollMs: 1_000,
      batch: 50,
      ...opts,
    };
  }

  /** The wait before attempt `attempts + 1`, after `attempts` failures. */
  backoffMs(attempts: number): number {
    return Math.min(this.#o.baseDelayMs * 2 ** Math.max(0, attempts - 1), this.#o.maxDelayMs);
  }

  /** One pass: attempts every due head once. Returns how many attempts were made. */
  async runOnce(): Promise<number> {
    const { db, clock } = this.#o;
    const now = clock.now();
    const heads = await db
      .selectFrom("webhook_deliveries as d")
      .innerJoin("webhook_endpoints as e", "e.id", "d.endpoint_id")
      .select(["d.id", "d.event_id", "d.payload", "d.attempts", "e.body as endpoint_body", "e.secret"])
      .where("d.state", "=", "pending")
      .where("e.state", "=", "enabled")
      .where("d.next_attempt_at_ms", "<=", now)
      .where("d.lease_until_ms", "<=", now)
      .where(({ not, exists, selectFrom }) =>
        not(
          exists(
            selectFrom("webhook_deliveries as p")
              .select("p.id")
              .whereRef("p.endpoint_id", "=", "d.endpoint_id")
              .whereRef("p.order_key", "=", "d.order_key")
              .where("p.state", "=", "pending")
              .where((eb) =>
                eb.or([
                  eb("p.order_seq", "<", eb.ref("d.order_seq")),
                  eb.and([eb("p.order_seq", "=", eb.ref("d.order_seq")), eb("p.id", "<", eb.ref("d.id"))]),
                ]),
              ),
          ),
        ),
      )
      .orderBy("d.next_attempt_at_ms")
      .limit(this.#o.batch)
      .execute();
    let attempted = 0;
    await Promise.all(
      heads.map(async (head) => {
        const claimed = await db
          .updateTable("webhook_deliveries")
          .set({ lease_until_ms: now + this.#o.leaseMs })
          .where("id", "=", head.id)
          .where("state", "=", "pending")
          .where("lease_until_ms", "<=", now)
          .executeTakeFirst();
        if (Number(claimed.numUpdatedRows) !== 1) return;
        attempted++;
        const url = (JSON.parse(head.endpoint_body) as { url: string }).url;
        const result = await this.attempt(url, head.secret, head.event_id, head.payload);
        await this.#settle(head.id, head.attempts + 1, result, url);
      }),
    );
    return attempted;
  }

  async #settle(id: string, attempts: number, result: AttemptResult, url: string): Promise<void> {
    const { db, clock, logger } = this.#o;
    const now = clock.now();
    if (result.ok) {
      await db
        .updateTable("webhook_deliveries")
        .set({ state: "delivered", attempts, lease_until_ms: 0, last_error: null, finished_at_ms: now })
        .where("id", "=", id)
        .execute();
      return;
    }
    const dead = attempts >= this.#o.maxAttempts;
    await db
      .updateTable("webhook_deliveries")
      .set({
        state: dead ? "dead" : "pending",
        attempts,
        lease_until_ms: 0,
        last_error: result.error ?? "failed",
        next_attempt_at_ms: dead ? now : now + this.backoffMs(attempts),
        finished_at_ms: dead ? now : null,
      })
      .where("id", "=", id)
      .execute();
    if (dead) logger.warn({ delivery_id: id, attempts, url, err: result.error }, "webhook delivery dead-lettered");
  }

  /** One signed POST of `payload`; 2xx is success. Never throws. */
  attempt(rawUrl: string, secret: string, messageId: string, payload: string): Promise<AttemptResult> {
    const url = new URL(rawUrl);
    const host = url.hostname.replace(/^\[|\]$/g, "");
    const allow = this.#o.allowPrivateTargets;
    if (!allow && url.protocol !== "https:") return Promise.resolve({ ok: false, error: "target refused: not https" });
    if (!allow && isIP(host) && isNonPublicAddress(host))
      return Promise.resolve({ ok: false, error: `target refused: ${host} is not public` });
    const headers = {
      ...signDelivery(secret, messageId, this.#o.clock.now(), payload),
      "content-type": "application/json",
      "content-length": String(Buffer.byteLength(payload)),
      "user-agent": "openma-webhooks",
    };
    const send = url.protocol === "https:" ? https.request : http.request;
    return new Promise<AttemptResult>((resolve) => {
      const req = send(url, { method: "POST", headers, timeout: this.#o.timeoutMs, ...(allow ? {} : { lookup: guardedLookup }) }, (res) => {
        res.resume();
        res.on("end", () => {
          const status = res.statusCode ?? 0;
          resolve(status >= 200 && status < 300 ? { ok: true } : { ok: false, error: `HTTP ${status}` });
        });
        res.on("error", (err) => resolve({ ok: false, error: err.message }));
      });
      req.on("timeout", () => req.destroy(new Error(`timed out after ${this.#o.timeoutMs} ms`)));
      req.on("error", (err) => resolve({ ok: false, error: err.message }));
      req.end(payload);
    });
  }

  /** Runs passes until `stop()`: back to back while work was due, else after `pollMs`. */
  start(): void {
    if (this.#loop) return;
    const stop = new AbortController();
    this.#stop = stop;
    this.#loop = (async () => {
      while (!stop.signal.aborted) {
        let attempted = 0;
        try {
          attempted = await this.runOnce();
        } catch (err) {
          this.#o.logger.warn({ err: (err as Error).message }, "webhook delivery pass failed");
        }
        if (attempted === 0) await this.#o.scheduler.sleep(this.#o.pollMs, stop.signal).catch(() => {});
      }
    })();
  }

  async stop(): Promise<void> {
    this.#stop?.abort();
    await this.#loop;
    this.#loop = null;
  }
}
