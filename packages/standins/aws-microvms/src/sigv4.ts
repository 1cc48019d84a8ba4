/**
 * Checks a request's SigV4 `Authorization` header the way the service does:
 * the credential scope must name a known key, this region and the `lambda`
 * signing name; `x-amz-date` must be within 15 minutes of now; and the
 * signature is recomputed with @smithy/signature-v4 (the signer the SDK
 * itself uses) over exactly the headers the client listed as signed. The
 * header parsing is the S3 stand-in's (one parser for both).
 */
import { createHash, createHmac } from "node:crypto";
import { parseAmzDate, parseAuthorization, signaturesEqual } from "@openma/s3-standin/sigv4";
import { SignatureV4 } from "@smithy/signature-v4";
import type { Checksum, SourceData } from "@smithy/types";

export const SIGNING_NAME = "lambda";
const MAX_SKEW_MS = 15 * 60_000;

export interface Credentials {
  accessKeyId: string;
  secretAccessKey: string;
}

export type Verdict =
  | { ok: true; accessKeyId: string }
  /** `type` is the error the service names in `x-amzn-errortype`. */
  | {
      ok: false;
      type: "MissingAuthenticationTokenException" | "UnrecognizedClientException" | "InvalidSignatureException";
      message: string;
    };

/** node:crypto behind the `Checksum` shape the signer takes (an HMAC when given a key). */
class NodeSha256 implements Checksum {
  #hash;
  constructor(secret?: SourceData) {
    this.#hash = secret === undefined ? createHash("sha256") : createHmac("sha256", toBuffer(secret));
  }
  update(data: Uint8Array): void {
    this.#hash.update(data);
  }
  async digest(): Promise<Uint8Array> {
    return new Uint8Array(this.#hash.digest());
  }
  reset(): void {
    throw new Error("not resettable");
  }
}

function toBuffer(data: SourceData): Buffer {
  if (typeof data === "string") return Buffer.from(data, "utf8");
  if (ArrayBuffer.isView(data)) return Buffer.from(data.buffer, data.byteOffset, data.byteLength);
  return Buffer.from(data);
}

export interface SignedRequest {
  method: string;
  url: URL;
  headers: Headers;
  body: Uint8Array;
}

export async function verifySigV4(request: SignedRequest, keys: readonly Credentials[], region: string, now: number): Promise<Verdict> {
  const header = request.headers.get("authorization");
  if (header === null) return { ok: false, type: "MissingAuthenticationTokenException", message: "Missing Authentication Token" };
  const auth = parseAuthorization(header);
  if (typeof auth === "string") return { ok: false, type: "InvalidSignatureException", message: auth };
  const key = keys.find((k) => k.accessKeyId === auth.accessKeyId);
  if (key === undefined)
    return { ok: false, type: "UnrecognizedClientException", message: "The security token included in the request is invalid." };
  if (auth.region !== region || auth.service !== SIGNING_NAME)
    return {
      ok: false,
      type: "InvalidSignatureException",
      message: `Credential should be scoped to a valid region and to '${SIGNING_NAME}'.`,
    };
  const amzDate = request.headers.get("x-amz-date") ?? "";
  const signedAt = parseAmzDate(amzDate);
  if (signedAt === undefined || amzDate.slice(0, 8) !== auth.date || !auth.signedHeaders.includes("host"))
    return {
      ok: false,
      type: "InvalidSignatureException",
      message: "x-amz-date and the host header must be signed and match the credential scope.",
    };
  if (Math.abs(now - signedAt) > MAX_SKEW_MS)
    return {
      ok: false,
      type: "InvalidSignatureException",
      message: "Signature expired: the request time is more than 15 minutes from the server's.",
    };

  // A signed x-amz-content-sha256 stands for the body in the signature: the body must then be what it names.
  const contentHash = request.headers.get("x-amz-content-sha256");
  if (contentHash !== null && contentHash !== createHash("sha256").update(request.body).digest("hex"))
    return {
      ok: false,
      type: "InvalidSignatureException",
      message: "The provided x-amz-content-sha256 header does not match what was computed.",
    };
  const headers: Record<string, string> = {};
  for (const name of auth.signedHeaders) headers[name] = request.headers.get(name) ?? "";
  const query: Record<string, string | string[]> = {};
  for (const [name, value] of request.url.searchParams) {
    const had = query[name];
    query[name] = had === undefined ? value : Array.isArray(had) ? [...had, value] : [had, value];
  }
  const signer = new SignatureV4({ credentials: key, region, service: SIGNING_NAME, sha256: NodeSha256, uriEscapePath: true });
  const signed = await signer.sign(
    {
      method: request.method,
      protocol: request.url.protocol,
      hostname: request.url.hostname,
      path: request.url.pathname,
      query,
      headers,
      body: request.body,
    },
    { signingDate: new Date(signedAt), signableHeaders: new Set(auth.signedHeaders) },
  );
  const expected = /Signature=([0-9a-f]{64})/.exec(String(signed.headers.authorization ?? ""))?.[1] ?? "";
  if (!signaturesEqual(expected, auth.signature))
    return {
      ok: false,
      type: "InvalidSignatureException",
      message: "The request signature we calculated does not match the signature you provided.",
    };
  return { ok: true, accessKeyId: key.accessKeyId };
}
