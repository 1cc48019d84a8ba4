/**
 * Starts the S3 stand-in on a local port. Point the official S3 client at
 * `endpoint` with `forcePathStyle: true`, the same region and credentials.
 */
import type { AddressInfo } from "node:net";
import { serve } from "@hono/node-server";
import { createS3App, type RecordedRequest } from "./app.ts";
import { type Fault, FaultQueue } from "./faults.ts";
import { MultipartUploads } from "./multipart.ts";
import { ObjectStore } from "./store.ts";

export interface S3StandInOptions {
  accessKeyId: string;
  secretAccessKey: string;
  /** Keep objects under this directory (they survive a restart); default in memory. */
  dir?: string;
  /** Default 0: a free port. */
  port?: number;
  host?: string;
  /** The one region requests must be signed for; default `us-east-1`. */
  region?: string;
  /** Buckets to create at start. */
  buckets?: string[];
  /** Server clock, for `Date`, `Last-Modified` and the 15-minute signature window. */
  now?: () => number;
  /** Largest accepted object; default 64 MiB (bodies are held in memory). */
  maxObjectBytes?: number;
  /** Keep at most this many recorded requests; default 1,000. */
  recordLimit?: number;
}

export interface S3StandIn {
  endpoint: string;
  region: string;
  /**
   * Queue `fault` for the next `times` (default 1) requests of its operation.
   * Resolves when the first of them arrives, so a test can act at that moment (abort a hanging call).
   */
  inject(fault: Fault, times?: number): Promise<void>;
  /** Multipart uploads created and neither completed nor aborted. */
  readonly pendingUploads: number;
  /** Faults queued and not yet triggered. */
  readonly pendingFaults: number;
  clearFaults(): void;
  /** The most recent requests, oldest first (authorization header left out). */
  readonly requests: readonly RecordedRequest[];
  close(): Promise<void>;
}

export async function startS3StandIn(opts: S3StandInOptions): Promise<S3StandIn> {
  if (!opts.accessKeyId || !opts.secretAccessKey) throw new Error("the S3 stand-in needs an access key id and a secret access key");
  const region = opts.region ?? "us-east-1";
  const now = opts.now ?? Date.now;
  const store = await ObjectStore.open(opts.dir);
  for (const b of opts.buckets ?? []) await store.createBucket(b, now());
  const faults = new FaultQueue();
  const uploads = new MultipartUploads();
  const requests: RecordedRequest[] = [];
  const limit = opts.recordLimit ?? 1000;
  const app = createS3App({
    accessKeyId: opts.accessKeyId,
    secretAccessKey: opts.secretAccessKey,
    region,
    now,
    maxObjectBytes: opts.maxObjectBytes ?? 64 * 1024 * 1024,
    store,
    uploads,
    faults,
    record(r) {
      requests.push(r);
      if (requests.length > limit) requests.splice(0, requests.length - limit);
    },
    onInternalError(err) {
      console.error("s3 stand-in internal error:", err);
    },
  });
  const host = opts.host ?? "127.0.0.1";
  const server = serve({ fetch: app.fetch, port: opts.port ?? 0, hostname: host });
  await new Promise<void>((resolve, reject) => {
    server.once("listening", resolve);
    server.once("error", reject);
  });
  const { port } = server.address() as AddressInfo;
  let closing: Promise<void> | undefined;
  return {
    endpoint: `http://${host.includes(":") ? `[${host}]` : host}:${port}`,
    region,
    inject: (fault, times) => faults.add(fault, times),
    get pendingUploads() {
      return uploads.pending;
    },
    get pendingFaults() {
      return faults.pending;
    },
    clearFaults: () => faults.clear(),
    requests,
    close() {
      closing ??= new Promise<void>((resolve) => {
        server.close(() => resolve());
        // Ends keep-alive sockets and releases hanging requests so close never waits on a client.
        (server as unknown as { closeAllConnections?: () => void }).closeAllConnections?.();
      });
      return closing;
    },
  };
}
