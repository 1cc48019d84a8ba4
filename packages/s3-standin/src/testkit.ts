/**
 * Test helpers: the official client pointed at a stand-in, S3 error
 * inspection, and hand-signed raw requests for what the SDK never sends.
 * Test-only (imports the AWS SDK, which the stand-in itself does not need).
 */
import { S3Client, type S3ClientConfig } from "@aws-sdk/client-s3";
import { sha256Hex } from "./checksums.ts";
import type { S3StandIn } from "./server.ts";
import { signRequest } from "./sigv4.ts";

export const CREDENTIALS = { accessKeyId: "AKIASTANDINTEST00001", secretAccessKey: "stand-in/test+secret=0123456789abcdefABCD" };

export function clientFor(standIn: S3StandIn, overrides: Partial<S3ClientConfig> = {}): S3Client {
  return new S3Client({
    endpoint: standIn.endpoint,
    region: standIn.region,
    forcePathStyle: true,
    credentials: CREDENTIALS,
    maxAttempts: 1,
    ...overrides,
  });
}

export interface S3Failure {
  name: string;
  status: number | undefined;
  message: string;
}

/** The rejection of an SDK call, reduced to what S3 said. */
export async function s3Failure(p: Promise<unknown>): Promise<S3Failure> {
  const outcome = await p.then(
    () => undefined,
    (e: unknown) => e as Error & { $metadata?: { httpStatusCode?: number } },
  );
  if (!outcome) throw new Error("expected the S3 call to fail, but it succeeded");
  return { name: outcome.name, status: outcome.$metadata?.httpStatusCode, message: outcome.message };
}

export interface RawOptions {
  headers?: Record<string, string>;
  body?: Uint8Array | string;
  /** Default: the SHA-256 of the body. */
  payloadHash?: string;
  /** Send without an Authorization header. */
  anonymous?: boolean;
  secretAccessKey?: string;
}

export interface RawResponse {
  status: number;
  headers: Headers;
  text: string;
}

/** A SigV4-signed request built by hand (path and query as given, already encoded). */
export async function rawRequest(standIn: S3StandIn, method: string, pathAndQuery: string, opts: RawOptions = {}): Promise<RawResponse> {
  const url = new URL(pathAndQuery, standIn.endpoint);
  const body = typeof opts.body === "string" ? Buffer.from(opts.body) : opts.body;
  const headers = opts.anonymous
    ? { ...opts.headers }
    : signRequest({
        method,
        url,
        headers: opts.headers ?? {},
        payloadHash: opts.payloadHash ?? sha256Hex(body ?? ""),
        accessKeyId: CREDENTIALS.accessKeyId,
        secretAccessKey: opts.secretAccessKey ?? CREDENTIALS.secretAccessKey,
        region: standIn.region,
        now: Date.now(),
      });
  // fetch sets Host itself, to the same url.host that was signed.
  delete headers.host;
  const res = await fetch(url, { method, headers, body: body === undefined ? undefined : new Uint8Array(body) });
  return { status: res.status, headers: res.headers, text: await res.text() };
}

/** `<Code>` of an S3 XML error body. */
export function xmlCode(text: string): string | undefined {
  return /<Code>([^<]*)<\/Code>/.exec(text)?.[1];
}
