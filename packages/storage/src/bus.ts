/**
 * Change notifications between writers and live readers ("session X has new
 * events", "environment Y has new work"). A notification carries no data of
 * its own: readers re-read the durable tables from their cursor, so a lost or
 * duplicated wake-up costs a query, never an event.
 *
 * SQLite is single-process, so an in-process emitter suffices. On Postgres
 * every process LISTENs on one channel and publishes with pg_notify, so
 * several `openma serve` processes sharing one database see each other.
 */
import { EventEmitter } from "node:events";
import pg from "pg";

export type Unsubscribe = () => void;

export interface ChangeBus {
  publish(topic: string): Promise<void>;
  /** `cb` runs on every publish to `topic`, and after a reconnect (missed wake-ups). */
  subscribe(topic: string, cb: () => void): Unsubscribe;
  close(): Promise<void>;
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
  async publish(topic: string): Promise<void> {
    this.topics.emit(topic);
  }
  subscribe(topic: string, cb: () => void): Unsubscribe {
    return this.topics.on(topic, cb);
  }
  async close(): Promise<void> {}
}

const CHANNEL = "openma_changes";

export class PostgresBus implements ChangeBus {
  private readonly topics = new TopicEmitter();
  private listener: pg.Client | null = null;
  private closed = false;
  private connecting: Promise<void> | null = null;

  constructor(
    private readonly pool: pg.Pool,
    private readonly clientConfig: pg.ClientConfig,
    private readonly onError: (err: Error) => void = () => {},
  ) {}

  async start(): Promise<void> {
    await this.connect();
  }

  private connect(): Promise<void> {
    this.connecting ??= (async () => {
      const client = new pg.Client(this.clientConfig);
      client.on("notification", (msg) => {
        if (msg.channel === CHANNEL && msg.payload) this.topics.emit(msg.payload);
      });
      client.on("error", (err) => {
        this.onError(err);
        this.reconnectSoon();
      });
      client.on("end", () => this.reconnectSoon());
      await client.connect();
      await client.query(`LISTEN ${CHANNEL}`);
      this.listener = client;
      this.connecting = null;
    })();
    return this.connecting;
  }

  private reconnectSoon(): void {
    if (this.closed || this.connecting) return;
    this.listener = null;
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
    await this.pool.query("select pg_notify($1, $2)", [CHANNEL, topic]);
  }

  subscribe(topic: string, cb: () => void): Unsubscribe {
    return this.topics.on(topic, cb);
  }

  async close(): Promise<void> {
    this.closed = true;
    await this.listener?.end().catch(() => {});
  }
}
