/**
 * What every request goes through before an operation runs: locating the
 * bucket and key in the path, SigV4 authentication, reading and verifying the
 * payload (`x-amz-content-sha256`, aws-chunked framing, `Content-MD5`,
 * `x-amz-checksum-*` headers and trailers). Failures are S3 errors.
 */

import {
  algorithmOfHeader,
  type ChecksumAlgorithm,
  checksumHeader,
  DIGEST_BYTES,
  decodeDigest,
  digest,
  md5,
  sha256Hex,
} from "./checksums.ts";
import { decodeAwsChunked } from "./chunked.ts";
import {
  canonicalRequest,
  credentialScope,
  parseAmzDate,
  parseAuthorization,
  parseQuery,
  sign,
  signaturesEqual,
  signingKey,
  stringToSign,
} from "./sigv4.ts";
import { errors, S3Error } from "./xml.ts";

export interface Target {
  rawPath: string;
  query: [string, string][];
  bucket: string | undefined;
  key: string | undefined;
  /** `/bucket/key` for error bodies. */
  resource: string;
}

export function parseTarget(rawUrl: string): Target {
  const q = rawUrl.indexOf("?");
  const rawPath = q < 0 ? rawUrl : rawUrl.slice(0, q);
  const query = parseQuery(q < 0 ? "" : rawUrl.slice(q + 1));
  if (!rawPath.startsWith("/") || !query) throw new S3Error(400, "InvalidURI", "Couldn't parse the specified URI.");
  const rest = rawPath.slice(1);
  const slash = rest.indexOf("/");
  try {
    const bucket = decodeURIComponent(slash < 0 ? rest : rest.slice(0, slash)) || undefined;
    const key = slash < 0 ? undefined : decodeURIComponent(rest.slice(slash + 1)) || undefined;
    const resource = `/${bucket ?? ""}${key === undefined ? "" : `/${key}`}`;
    return { rawPath, query, bucket, key, resource };
  } catch {
    throw new S3Error(400, "InvalidURI", "Couldn't parse the specified URI.");
  }
}

export type Headers = (name: string) => string | undefined;

export interface AuthConfig {
  accessKeyId: string;
  secretAccessKey: string;
  region: string;
  now: () => number;
}

const MAX_SKEW_MS = 15 * 60 * 1000;
const HEX64 = /^[0-9a-f]{64}$/;
export const UNSIGNED_PAYLOAD = "UNSIGNED-PAYLOAD";
export const STREAMING_UNSIGNED_TRAILER = "STREAMING-UNSIGNED-PAYLOAD-TRAILER";

/** Verifies the request's SigV4 `Authorization` header; returns the declared payload hash mode. */
export function authenticate(method: string, target: Target, header: Headers, allHeaderNames: string[], cfg: AuthConfig): string {
  const value = header("authorization");
  if (!value) {
    if (target.query.some(([k]) => k === "X-Amz-Signature")) throw errors.notImplemented("presigned URLs");
    throw errors.accessDenied();
  }
  const auth = parseAuthorization(value);
  if (typeof auth === "string") throw errors.authorizationHeaderMalformed(auth);
  if (auth.accessKeyId !== cfg.accessKeyId) throw errors.invalidAccessKeyId(auth.accessKeyId);
  if (auth.service !== "s3") throw errors.authorizationHeaderMalformed(`incorrect service '${auth.service}'; expecting 's3'`);
  if (auth.region !== cfg.region) {
    const err = errors.authorizationHeaderMalformed(`the region '${auth.region}' is wrong; expecting '${cfg.region}'`);
    err.extra.Region = cfg.region;
    throw err;
  }
  const amzDate = header("x-amz-date") ?? "";
  const at = parseAmzDate(amzDate);
  if (at === undefined) throw new S3Error(403, "AccessDenied", "AWS authentication requires a valid Date or x-amz-date header");
  if (amzDate.slice(0, 8) !== auth.date) {
    throw errors.authorizationHeaderMalformed("Invalid credential date. Date is not the same as X-Amz-Date.");
  }
  const now = cfg.now();
  if (Math.abs(now - at) > MAX_SKEW_MS) throw errors.requestTimeTooSkewed(amzDate, new Date(now).toISOString().replace(/\.\d{3}Z$/, "Z"));
  if (!auth.signedHeaders.includes("host")) throw errors.authorizationHeaderMalformed("the host header must be signed");
  const unsigned = allHeaderNames.filter((n) => n.startsWith("x-amz-") && !auth.signedHeaders.includes(n));
  if (unsigned.length > 0) {
    throw new S3Error(403, "AccessDenied", "There were headers present in the request which were not signed", {
      HeadersNotSigned: unsigned.join(", "),
    });
  }
  const payloadHash = header("x-amz-content-sha256");
  if (!payloadHash) throw errors.invalidRequest("Missing required header for this request: x-amz-content-sha256");
  const canonical = canonicalRequest({
    method,
    rawPath: target.rawPath,
    query: target.query,
    header,
    signedHeaders: auth.signedHeaders,
    payloadHash,
  });
  const toSign = stringToSign(amzDate, credentialScope(auth.date, auth.region, auth.service), canonical);
  const expected = sign(signingKey(cfg.secretAccessKey, auth.date, auth.region, auth.service), toSign);
  if (!signaturesEqual(expected, auth.signature)) {
    throw errors.signatureDoesNotMatch({
      AWSAccessKeyId: auth.accessKeyId,
      StringToSign: toSign,
      SignatureProvided: auth.signature,
      CanonicalRequest: canonical,
    });
  }
  if (payloadHash.startsWith("STREAMING-AWS4-HMAC-SHA256-PAYLOAD")) throw errors.notImplemented("signed aws-chunked payloads");
  if (payloadHash !== UNSIGNED_PAYLOAD && payloadHash !== STREAMING_UNSIGNED_TRAILER && !HEX64.test(payloadHash)) {
    throw errors.invalidArgument(
      "x-amz-content-sha256 must be UNSIGNED-PAYLOAD, STREAMING-UNSIGNED-PAYLOAD-TRAILER, or a valid sha256 value.",
      "x-amz-content-sha256",
      payloadHash,
    );
  }
  return payloadHash;
}

/** Reads at most `limit` bytes; more is EntityTooLarge (checked while reading, so memory stays bounded). */
export async function readBody(body: ReadableStream<Uint8Array> | null, limit: number): Promise<Buffer> {
  if (!body) return Buffer.alloc(0);
  const parts: Uint8Array[] = [];
  let total = 0;
  const reader = body.getReader();
  for (;;) {
    // A client that goes away mid-upload is the client's problem, not an internal error.
    const { done, value } = await reader.read().catch(() => {
      throw errors.incompleteBody("The request body terminated unexpectedly");
    });
    if (done) break;
    total += value.byteLength;
    if (total > limit) {
      await reader.cancel().catch(() => undefined);
      throw errors.entityTooLarge(total, limit);
    }
    parts.push(value);
  }
  return Buffer.concat(parts);
}

export interface Payload {
  data: Buffer;
  trailers: Map<string, string>;
}

/**
 * Verifies the raw body against the signed payload hash and unwraps
 * aws-chunked framing. `corrupt` (fault injection) damages the bytes as if in
 * transit, before any check sees them.
 */
export function decodePayload(raw: Buffer, payloadHash: string, header: Headers, corrupt?: (b: Buffer) => Buffer): Payload {
  if (payloadHash === STREAMING_UNSIGNED_TRAILER) {
    if (!(header("content-encoding") ?? "").split(",").some((e) => e.trim() === "aws-chunked")) {
      throw errors.invalidArgument(
        "aws-chunked encoding is required for streaming payloads",
        "Content-Encoding",
        header("content-encoding") ?? "",
      );
    }
    const decoded = decodeAwsChunked(raw);
    const data = corrupt ? corrupt(decoded.data) : decoded.data;
    const declared = header("x-amz-decoded-content-length");
    if (declared === undefined) throw errors.missingContentLength();
    if (!/^\d+$/.test(declared) || Number(declared) !== data.length) throw errors.incompleteBody();
    return { data, trailers: decoded.trailers };
  }
  const data = corrupt ? corrupt(raw) : raw;
  if (payloadHash !== UNSIGNED_PAYLOAD) {
    const computed = sha256Hex(data);
    if (computed !== payloadHash) throw errors.contentSha256Mismatch(payloadHash, computed);
  }
  return { data, trailers: new Map() };
}

export interface VerifiedChecksum {
  algorithm: ChecksumAlgorithm;
  value: string;
}

/**
 * Checks `Content-MD5` and the one `x-amz-checksum-*` value (header or
 * trailer) against the bytes received. Returns the verified flexible checksum.
 */
export function verifyIntegrity(
  payload: Payload,
  header: Headers,
  allHeaderNames: string[],
  requireOne: boolean,
): VerifiedChecksum | undefined {
  const provided: VerifiedChecksum[] = [];
  for (const name of allHeaderNames) {
    const algorithm = algorithmOfHeader(name);
    if (algorithm) provided.push({ algorithm, value: header(name) ?? "" });
  }
  const declaredTrailer = header("x-amz-trailer")?.trim().toLowerCase();
  for (const name of payload.trailers.keys()) if (name !== declaredTrailer) throw errors.malformedTrailer();
  if (declaredTrailer !== undefined) {
    const algorithm = algorithmOfHeader(declaredTrailer);
    const value = payload.trailers.get(declaredTrailer);
    if (!algorithm || value === undefined) throw errors.malformedTrailer();
    provided.push({ algorithm, value });
  }
  if (provided.length > 1)
    throw errors.invalidRequest("Expecting a single x-amz-checksum- header. Multiple checksum Types are not allowed.");
  const sdkAlgorithm = header("x-amz-sdk-checksum-algorithm")?.toUpperCase();
  if (sdkAlgorithm !== undefined) {
    if (provided.length === 0) {
      throw errors.invalidRequest(
        "x-amz-sdk-checksum-algorithm specified, but no corresponding x-amz-checksum-* or x-amz-trailer headers were found.",
      );
    }
    if (provided[0]!.algorithm !== sdkAlgorithm) throw errors.invalidRequest("Value for x-amz-sdk-checksum-algorithm header is invalid.");
  }
  const contentMd5 = header("content-md5");
  if (contentMd5 !== undefined) {
    const expected = decodeDigest(contentMd5.trim(), 16);
    if (!expected) throw errors.invalidDigest();
    if (!expected.equals(md5(payload.data))) throw errors.badDigest("Content-MD5");
  }
  const checksum = provided[0];
  if (checksum) {
    const expected = decodeDigest(checksum.value, DIGEST_BYTES[checksum.algorithm]);
    if (!expected) throw errors.invalidRequest(`Value for ${checksumHeader(checksum.algorithm)} header is invalid.`);
    if (!expected.equals(digest(checksum.algorithm, payload.data))) throw errors.badDigest(checksum.algorithm);
  }
  if (requireOne && contentMd5 === undefined && !checksum) {
    throw errors.invalidRequest("Missing required header for this request: Content-MD5 OR x-amz-checksum-*");
  }
  return checksum;
}
