/**
 * Change notifications between writers and live readers ("session X has new
 * events", "environment Y has new work"). A notification carries no data of
 * its own: readers re-read the durable tables from their cursor, so a lost or
 * duplicated wake-up costs a query, never an event.
 *
 * SQLite is single-process, so an in-process emitter suffices. On Postgres
 * every process LISTENs on its schema's channel and publishes with pg_notify
 * (inside the writing transaction where it can: delivered at commit), so
 * several `openma serve` processes sharing one database see each other.
 */
import { createHash, randomBytes } from "node:crypto";
import { EventEmitter } from "node:events";
import { type RawBuilder, sql } from "kysely";
import pg from "pg";

export type Unsubscribe = () => void;

export interface ChangeBus {
  publish(topic: string): Promise<void>;
  /**
   * An SQL expression that publishes `topic` when the transaction running it
   * commits (and never if it rolls back), for a bus whose publish is itself
   * transactional. A writer folds it into a statement it runs anyway and skips
   * the publish after its commit: no extra round trip, and readers are woken
   * by the commit itself. Absent: publish after the commit.
   */
  readonly publishOnCommit?: (topic: string) => RawBuilder<unknown>;
  /**
   * Told by a writer right after its transaction that used `publishOnCommit`
   * for `topics` committed: wakes this process's subscribers at once, instead
   * of after the database's delivery comes back round, which is then not
   * repeated. Optional for a writer: without it the database's delivery wakes
   * them as before.
   */
  readonly committed?: (topics: readonly string[]) => void;
  /** `cb` runs on every publish to `topic`, and after a reconnect (missed wake-ups). */
  subscribe(topic: string, cb: () => void): Unsubscribe;
  /**
   * Ephemeral data for live readers, never stored (the stream's `event_deltas`
   * previews): best effort, lost when nobody listens or a connection drops.
   * `payload` must stay under MAX_BROADCAST_BYTES.
   */
  broadcast(topic: string, payload: string): Promise<void>;
  listen(topic: string, cb: (payload: string) => void): Unsubscribe;
  close(): Promise<void>;
}

/** pg_notify refuses payloads of 8000 bytes and more; the topic travels in the same payload. */
export const MAX_BROADCAST_BYTES = 7000;

function checkPayload(topic: string, payload: string): void {
  if (Buffer.byteLength(topic) + Buffer.byteLength(payload) > MAX_BROADCAST_BYTES)
    throw new Error(`bus broadcast on ${topic}: payload exceeds ${MAX_BROADCAST_BYTES} bytes`);
}

/** Data listeners per topic (kept apart from the wake-up topics). */
class DataEmitter {
  private readonly emitter = new EventEmitter();
  constructor() {
    this.emitter.setMaxListeners(0);
  }
  on(topic: string, cb: (payload: string) => void): Unsubscribe {
    this.emitter.on(topic, cb);
    return () => this.emitter.off(topic, cb);
  }
  emit(topic: string, payload: string): void {
    this.emitter.emit(topic, payload);
  }
}

class TopicEmitter {
  private readonly emitter = new EventEmitter();
  constructor() {
    this.emitter.setMaxListeners(0);
  }
  on(topic: string, cb: () => void): Unsubscribe {
    this.emitter.on(topic, cb);
    return () => this.emitter.off(topic, cb);
  }
  emit(topic: string): void {
    this.emitter.emit(topic);
  }
  emitAll(): void {
    for (const name of this.emitter.eventNames()) this.emitter.emit(name);
  }
}

export class InProcessBus implements ChangeBus {
  private readonly topics = new TopicEmitter();
  private readonly data = new DataEmitter();
  async publish(topic: string): Promise<void> {
    this.topics.emit(topic);
  }
  subscribe(topic: string, cb: () => void): Unsubscribe {
    return this.topics.on(topic, cb);
  }
  async broadcast(topic: string, payload: string): Promise<void> {
    checkPayload(topic, payload);
    this.data.emit(topic, payload);
  }
  listen(topic: string, cb: (payload: string) => void): Unsubscribe {
    return this.data.on(topic, cb);
  }
  async close(): Promise<void> {}
}

/**
 * The bus's two channels (wake-ups, and broadcasts as `<topic>\n<payload>`: the same connection
 * LISTENs on both, so their order is kept). NOTIFY reaches every listener of the database, so with a
 * schema (several deployments, or test runs, sharing one database) the channels are the schema's own:
 * otherwise every `execution:pending` of one would send the workers of all the others claiming.
 */
function channelsFor(schema: string | undefined): { changes: string; data: string } {
  // Channel names are identifiers (at most 63 bytes); a long schema name is replaced by its hash.
  const suffix = !schema ? "" : schema.length <= 40 ? `_${schema}` : `_${createHash("sha256").update(schema).digest("hex").slice(0, 24)}`;
  return { changes: `openma_changes${suffix}`, data: `openma_data${suffix}` };
}

/**
 * Pairs this process's local wake-ups after its own commits (`committed`) with
 * the database's delivery of the same notifications, so that each commit wakes
 * local subscribers once, by whichever comes first. Per topic: local wake-ups
 * whose delivery is still to come, and deliveries whose `committed` is still to
 * come. A count left over (a writer that never said `committed`) only makes a
 * later commit wait for its own delivery, never loses a wake-up: every commit
 * has either its local wake-up or its delivery.
 */
class OwnCommits {
  private readonly ahead = new Map<string, { local: number; delivered: number }>();
  /** A commit of ours; true when its subscribers are to be woken now. */
  committed(topic: string): boolean {
    return this.take(topic, "delivered", "local");
  }
  /** The database delivered one of our notifications; true when its subscribers are to be woken now. */
  delivered(topic: string): boolean {
    return this.take(topic, "local", "delivered");
  }
  clear(): void {
    this.ahead.clear();
  }
  private take(topic: string, other: "local" | "delivered", mine: "local" | "delivered"): boolean {
    const counts = this.ahead.get(topic) ?? { local: 0, delivered: 0 };
    const wake = counts[other] === 0;
    if (wake) counts[mine] += 1;
    else counts[other] -= 1;
    if (counts.local === 0 && counts.delivered === 0) this.ahead.delete(topic);
    else this.ahead.set(topic, counts);
    return wake;
  }
}

export class PostgresBus implements ChangeBus {
  private readonly topics = new TopicEmitter();
  /** Tags this bus's transactional notifications (`<topic>\n<origin>`), so that it knows its own when they come back. */
  private readonly origin = randomBytes(6).toString("hex");
  private readonly own = new OwnCommits();
  private readonly data = new DataEmitter();
  private listener: pg.Client | null = null;
  private closed = false;
  private connecting: Promise<void> | null = null;

  private readonly channels: { changes: string; data: string };

  constructor(
    private readonly pool: pg.Pool,
    private readonly clientConfig: pg.ClientConfig,
    private readonly onError: (err: Error) => void = () => {},
    /** The Postgres schema the storage lives in, if not the default: its channels are its own. */
    schema?: string,
  ) {
    this.channels = channelsFor(schema);
  }

  async start(): Promise<void> {
    await this.connect();
  }

  private connect(): Promise<void> {
    this.connecting ??= (async () => {
      const client = new pg.Client(this.clientConfig);
      client.on("notification", (msg) => {
        if (msg.channel === this.channels.changes && msg.payload) this.onChange(msg.payload);
        if (msg.channel === this.channels.data && msg.payload) {
          const cut = msg.payload.indexOf("\n");
          if (cut > 0) this.data.emit(msg.payload.slice(0, cut), msg.payload.slice(cut + 1));
        }
      });
      client.on("error", (err) => {
        this.onError(err);
        this.reconnectSoon();
      });
      client.on("end", () => this.reconnectSoon());
      await client.connect();
      await client.query(`LISTEN ${this.channels.changes}`);
      await client.query(`LISTEN ${this.channels.data}`);
      this.listener = client;
      this.connecting = null;
    })();
    return this.connecting;
  }

  private onChange(payload: string): void {
    // `<topic>` from publish, `<topic>\n<origin>` from a transaction: ours only when no local wake-up came first.
    const cut = payload.indexOf("\n");
    const topic = cut < 0 ? payload : payload.slice(0, cut);
    if (cut < 0 || payload.slice(cut + 1) !== this.origin || this.own.delivered(topic)) this.topics.emit(topic);
  }

  private reconnectSoon(): void {
    if (this.closed || this.connecting) return;
    this.listener = null;
    // Deliveries missed while disconnected never pair with their local wake-ups: start the pairing afresh.
    this.own.clear();
    // Readers may have missed notifications while disconnected: wake them all.
    setTimeout(() => {
      if (this.closed) return;
      this.connect()
        .then(() => this.topics.emitAll())
        .catch((err: Error) => {
          this.connecting = null;
          this.onError(err);
          this.reconnectSoon();
        });
    }, 250).unref();
  }

  async publish(topic: string): Promise<void> {
    await this.pool.query("select pg_notify($1, $2)", [this.channels.changes, topic]);
  }

  /** NOTIFY inside a transaction is queued and delivered by Postgres at commit, dropped on rollback. */
  readonly publishOnCommit = (topic: string): RawBuilder<unknown> =>
    sql`pg_notify(${this.channels.changes}, ${`${topic}\n${this.origin}`})`;

  readonly committed = (topics: readonly string[]): void => {
    for (const topic of new Set(topics)) if (this.own.committed(topic)) this.topics.emit(topic);
  };

  subscribe(topic: string, cb: () => void): Unsubscribe {
    return this.topics.on(topic, cb);
  }

  async broadcast(topic: string, payload: string): Promise<void> {
    checkPayload(topic, payload);
    await this.pool.query("select pg_notify($1, $2)", [this.channels.data, `${topic}\n${payload}`]);
  }

  listen(topic: string, cb: (payload: string) => void): Unsubscribe {
    return this.data.on(topic, cb);
  }

  async close(): Promise<void> {
    this.closed = true;
    await this.listener?.end().catch(() => {});
  }
}

/**
 * Publishes `topics` when `trx` commits, in one statement, if the bus is
 * transactional (see `ChangeBus.publishOnCommit`); returns false when it is
 * not, and the caller then publishes after its commit.
 */
export async function publishOnCommitIn(
  bus: ChangeBus,
  trx: Parameters<RawBuilder<unknown>["execute"]>[0],
  topics: readonly string[],
): Promise<boolean> {
  const notice = bus.publishOnCommit;
  if (!notice) return false;
  if (topics.length > 0) await sql`select ${sql.join(topics.map((topic) => notice(topic)))}`.execute(trx);
  return true;
}
