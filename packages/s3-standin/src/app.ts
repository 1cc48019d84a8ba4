/**
 * The stand-in's HTTP surface: a Hono app speaking S3's REST protocol with
 * path-style addressing (`/bucket/key`). One catch-all route dispatches on
 * method, path and sub-resource the way S3 does; every request is SigV4
 * authenticated and every failure is an S3 XML error.
 */
import { randomBytes } from "node:crypto";
import type { HttpBindings } from "@hono/node-server";
import { RESPONSE_ALREADY_SENT } from "@hono/node-server/utils/response";
import { Hono } from "hono";
import { checksumHeader, checksumValue, md5 } from "./checksums.ts";
import { type Fault, type FaultQueue, flipByte, type S3Operation } from "./faults.ts";
import { listBucketsXml, listObjectsV2 } from "./listing.ts";
import {
  assemble,
  completeXml,
  creationAlgorithm,
  initiateXml,
  type MultipartUploads,
  parseCompleteRequest,
  partNumberOf,
  recordPart,
} from "./multipart.ts";
import {
  authenticate,
  decodePayload,
  type Headers,
  type Payload,
  parseTarget,
  readBody,
  STREAMING_UNSIGNED_TRAILER,
  type Target,
  verifyIntegrity,
} from "./request.ts";
import type { ObjectMeta, ObjectStore } from "./store.ts";
import { element, errors, errorXml, parseCreateBucket, parseDeleteRequest, S3_XMLNS, S3Error, XML_DECLARATION } from "./xml.ts";

export interface RecordedRequest {
  op: S3Operation | undefined;
  method: string;
  url: string;
  /** Request headers, `authorization` left out. */
  headers: Record<string, string>;
  /** Status sent; 0 when the connection was dropped without a response (reset, hang). */
  status: number;
}

export interface AppConfig {
  accessKeyId: string;
  secretAccessKey: string;
  region: string;
  now: () => number;
  maxObjectBytes: number;
  store: ObjectStore;
  uploads: MultipartUploads;
  faults: FaultQueue;
  record(r: RecordedRequest): void;
  /** Bugs, not S3 errors: reported here and answered as InternalError. */
  onInternalError(err: unknown): void;
}

interface Ctx {
  cfg: AppConfig;
  method: string;
  target: Target;
  header: Headers;
  headerNames: string[];
  fault: Fault | undefined;
  payload: Payload;
}

type Env = { Bindings: HttpBindings };

// Operations on these sub-resources are refused rather than silently treated as plain object calls.
// biome-ignore format: a word list
const UNSUPPORTED_SUBRESOURCES = new Set([
  "acl", "accelerate", "analytics", "attributes", "cors", "encryption", "inventory", "legal-hold", "lifecycle", "location",
  "logging", "metrics", "notification", "object-lock", "ownershipControls", "policy", "publicAccessBlock",
  "replication", "requestPayment", "restore", "retention", "select", "tagging", "torrent", "versioning",
  "versions", "website", "intelligent-tiering", "session",
]);

function resolveOperation(method: string, t: Target, header: Headers): S3Operation {
  const sub = t.query.find(([k]) => UNSUPPORTED_SUBRESOURCES.has(k));
  if (sub) throw errors.notImplemented(`the ${sub[0]} sub-resource`);
  const has = (name: string) => t.query.some(([k]) => k === name);
  if (has("uploads") || has("uploadId") || has("partNumber")) return multipartOperation(method, t, has);
  if (t.bucket === undefined) {
    if (method === "GET") return "ListBuckets";
    throw errors.methodNotAllowed(method);
  }
  if (t.key === undefined) {
    if (method === "PUT") return "CreateBucket";
    if (method === "HEAD") return "HeadBucket";
    if (method === "DELETE") return "DeleteBucket";
    if (method === "POST" && has("delete")) return "DeleteObjects";
    if (method === "GET" && t.query.some(([k, v]) => k === "list-type" && v === "2")) return "ListObjectsV2";
    if (method === "GET") throw errors.notImplemented("ListObjects (v1); use ListObjectsV2");
    throw errors.methodNotAllowed(method);
  }
  if (method === "PUT") {
    if (header("x-amz-copy-source") !== undefined) throw errors.notImplemented("CopyObject");
    return "PutObject";
  }
  if (method === "GET") return "GetObject";
  if (method === "HEAD") return "HeadObject";
  if (method === "DELETE") return "DeleteObject";
  throw errors.methodNotAllowed(method);
}

/** The multipart sub-resources: the four calls of an upload; listing uploads or parts, and part reads, are refused. */
function multipartOperation(method: string, t: Target, has: (name: string) => boolean): S3Operation {
  if (t.bucket === undefined || t.key === undefined) {
    if (has("uploads")) throw errors.notImplemented("ListMultipartUploads");
    throw errors.methodNotAllowed(method);
  }
  if (method === "POST" && has("uploads") && !has("uploadId")) return "CreateMultipartUpload";
  if (method === "PUT" && has("uploadId") && has("partNumber")) return "UploadPart";
  if (method === "POST" && has("uploadId") && !has("partNumber")) return "CompleteMultipartUpload";
  if (method === "DELETE" && has("uploadId") && !has("partNumber")) return "AbortMultipartUpload";
  if (method === "GET" && has("uploadId")) throw errors.notImplemented("ListParts");
  if ((method === "GET" || method === "HEAD") && has("partNumber")) throw errors.notImplemented("part reads (partNumber)");
  throw errors.methodNotAllowed(method);
}

function xmlResponse(status: number, xml: string, headers: Record<string, string> = {}): Response {
  return new Response(xml, { status, headers: { "content-type": "application/xml", ...headers } });
}

function requireBucket(ctx: Ctx): string {
  const bucket = ctx.target.bucket!;
  if (!ctx.cfg.store.hasBucket(bucket)) throw errors.noSuchBucket(bucket);
  return bucket;
}

const BUCKET_NAME = /^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$/;

async function createBucket(ctx: Ctx): Promise<Response> {
  const bucket = ctx.target.bucket!;
  if (!BUCKET_NAME.test(bucket) || bucket.includes("..") || /^\d+\.\d+\.\d+\.\d+$/.test(bucket)) throw errors.invalidBucketName(bucket);
  const { locationConstraint } = parseCreateBucket(ctx.payload.data.toString("utf8"));
  if (locationConstraint && locationConstraint !== ctx.cfg.region) {
    throw new S3Error(
      400,
      "IllegalLocationConstraintException",
      `The ${locationConstraint} location constraint is incompatible for the region specific endpoint this request was sent to.`,
    );
  }
  if (!(await ctx.cfg.store.createBucket(bucket, ctx.cfg.now()))) throw errors.bucketAlreadyOwnedByYou(bucket);
  return new Response(null, { status: 200, headers: { location: `/${bucket}` } });
}

async function deleteBucket(ctx: Ctx): Promise<Response> {
  const bucket = ctx.target.bucket!;
  const result = await ctx.cfg.store.deleteBucket(bucket);
  if (result === "missing") throw errors.noSuchBucket(bucket);
  if (result === "not_empty") throw errors.bucketNotEmpty(bucket);
  return new Response(null, { status: 204 });
}

function userMetadata(ctx: Ctx): Record<string, string> {
  const out: Record<string, string> = {};
  for (const n of ctx.headerNames) if (n.startsWith("x-amz-meta-")) out[n.slice("x-amz-meta-".length)] = ctx.header(n) ?? "";
  return out;
}

async function putObject(ctx: Ctx): Promise<Response> {
  const bucket = requireBucket(ctx);
  const key = ctx.target.key!;
  if (Buffer.byteLength(key) > 1024) throw errors.keyTooLong();
  const { data } = ctx.payload;
  if (data.length > ctx.cfg.maxObjectBytes) throw errors.entityTooLarge(data.length, ctx.cfg.maxObjectBytes);
  const verified = verifyIntegrity(ctx.payload, ctx.header, ctx.headerNames, false);
  const existing = ctx.cfg.store.head(bucket, key);
  const ifNoneMatch = ctx.header("if-none-match");
  if (ifNoneMatch !== undefined && existing && (ifNoneMatch.trim() === "*" || etagMatches(ifNoneMatch, existing.etag))) {
    throw errors.preconditionFailed("If-None-Match");
  }
  const ifMatch = ctx.header("if-match");
  if (ifMatch !== undefined) {
    if (!existing) throw errors.noSuchKey(key);
    if (!etagMatches(ifMatch, existing.etag)) throw errors.preconditionFailed("If-Match");
  }
  // Objects uploaded without a checksum get a CRC64NVME one, as S3 does since 2025.
  const checksum = verified ?? { algorithm: "CRC64NVME" as const, value: checksumValue("CRC64NVME", data) };
  const meta: ObjectMeta = {
    key,
    size: data.length,
    etag: md5(data).toString("hex"),
    lastModified: Math.floor(ctx.cfg.now() / 1000) * 1000,
    contentType: ctx.header("content-type") ?? "binary/octet-stream",
    checksum,
    metadata: userMetadata(ctx),
  };
  await ctx.cfg.store.put(bucket, meta, data);
  return new Response(null, {
    status: 200,
    headers: { etag: `"${meta.etag}"`, [checksumHeader(checksum.algorithm)]: checksum.value, "x-amz-checksum-type": "FULL_OBJECT" },
  });
}

function etagMatches(condition: string, etag: string): boolean {
  return condition.split(",").some((c) => {
    const v = c.trim();
    return v === "*" || v.replace(/^W\//, "").replace(/^"|"$/g, "") === etag;
  });
}

type Range = { start: number; end: number };

/** `bytes=a-b`, `bytes=a-`, `bytes=-n`; anything else is ignored (whole object), as HTTP and S3 do. */
function parseRange(value: string, size: number): Range | "unsatisfiable" | undefined {
  const m = /^bytes=(\d*)-(\d*)$/.exec(value.trim());
  if (!m || (m[1] === "" && m[2] === "")) return undefined;
  if (m[1] === "") {
    const n = Number(m[2]);
    if (n === 0 || size === 0) return "unsatisfiable";
    return { start: Math.max(0, size - n), end: size - 1 };
  }
  const start = Number(m[1]);
  if (m[2] !== "" && Number(m[2]) < start) return undefined;
  if (start >= size) return "unsatisfiable";
  return { start, end: m[2] === "" ? size - 1 : Math.min(Number(m[2]), size - 1) };
}

/** RFC 7232 order: If-Match, If-Unmodified-Since, If-None-Match, If-Modified-Since. */
function checkConditions(ctx: Ctx, meta: ObjectMeta): Response | undefined {
  const ifMatch = ctx.header("if-match");
  const ifUnmodified = Date.parse(ctx.header("if-unmodified-since") ?? "");
  if (ifMatch !== undefined ? !etagMatches(ifMatch, meta.etag) : meta.lastModified > ifUnmodified) {
    throw errors.preconditionFailed(ifMatch !== undefined ? "If-Match" : "If-Unmodified-Since");
  }
  const ifNoneMatch = ctx.header("if-none-match");
  const ifModified = Date.parse(ctx.header("if-modified-since") ?? "");
  if (ifNoneMatch !== undefined ? etagMatches(ifNoneMatch, meta.etag) : meta.lastModified <= ifModified) {
    return new Response(null, {
      status: 304,
      headers: { etag: `"${meta.etag}"`, "last-modified": new Date(meta.lastModified).toUTCString() },
    });
  }
  return undefined;
}

function objectHeaders(ctx: Ctx, meta: ObjectMeta, whole: boolean): Record<string, string> {
  const headers: Record<string, string> = {
    "content-type": meta.contentType,
    etag: `"${meta.etag}"`,
    "last-modified": new Date(meta.lastModified).toUTCString(),
    "accept-ranges": "bytes",
  };
  for (const [k, v] of Object.entries(meta.metadata)) headers[`x-amz-meta-${k}`] = v;
  // Like S3: the stored checksum is returned on request, and only for the whole object.
  if (whole && ctx.header("x-amz-checksum-mode")?.toUpperCase() === "ENABLED") {
    headers[checksumHeader(meta.checksum.algorithm)] = meta.checksum.value;
    headers["x-amz-checksum-type"] = meta.checksumType ?? "FULL_OBJECT";
  }
  return headers;
}

async function getOrHeadObject(ctx: Ctx, c: { env: HttpBindings }, head: boolean): Promise<Response> {
  const bucket = requireBucket(ctx);
  const key = ctx.target.key!;
  // One locked read gives matching metadata and bytes for GET.
  const read = head ? undefined : await ctx.cfg.store.read(bucket, key);
  const found = head ? ctx.cfg.store.head(bucket, key) : read?.meta;
  if (!found) throw errors.noSuchKey(key);
  const notModified = checkConditions(ctx, found);
  if (notModified) return notModified;
  const rangeHeader = ctx.header("range");
  const range = rangeHeader === undefined ? undefined : parseRange(rangeHeader, found.size);
  if (range === "unsatisfiable") throw errors.invalidRange(rangeHeader!, found.size);
  const headers = objectHeaders(ctx, found, !range);
  const status = range ? 206 : 200;
  if (range) headers["content-range"] = `bytes ${range.start}-${range.end}/${found.size}`;
  headers["content-length"] = String(range ? range.end - range.start + 1 : found.size);
  if (!read) return new Response(null, { status, headers });
  let body = range ? read.data.subarray(range.start, range.end + 1) : read.data;
  if (ctx.fault?.kind === "corrupt") body = flipByte(body).subarray(0, body.length);
  if (ctx.fault?.kind === "truncate") return sendTruncated(c.env, status, headers, body, ctx.fault.keepBytes);
  return new Response(new Uint8Array(body), { status, headers });
}

/** Full-length headers, part of the body, then a dropped connection: what a reset mid-download looks like. */
function sendTruncated(env: HttpBindings, status: number, headers: Record<string, string>, body: Buffer, keepBytes?: number): Response {
  const keep = Math.min(keepBytes ?? body.length >> 1, Math.max(0, body.length - 1));
  env.outgoing.writeHead(status, headers);
  env.outgoing.write(body.subarray(0, keep), () => env.incoming.socket.destroy());
  return RESPONSE_ALREADY_SENT;
}

async function deleteObject(ctx: Ctx): Promise<Response> {
  const bucket = requireBucket(ctx);
  await ctx.cfg.store.delete(bucket, ctx.target.key!);
  return new Response(null, { status: 204 });
}

async function deleteObjects(ctx: Ctx): Promise<Response> {
  const bucket = requireBucket(ctx);
  verifyIntegrity(ctx.payload, ctx.header, ctx.headerNames, true);
  const request = parseDeleteRequest(ctx.payload.data.toString("utf8"));
  const deleted: string[] = [];
  for (const key of request.keys) {
    await ctx.cfg.store.delete(bucket, key);
    deleted.push(`<Deleted>${element("Key", key)}</Deleted>`);
  }
  return xmlResponse(200, `${XML_DECLARATION}<DeleteResult xmlns="${S3_XMLNS}">${request.quiet ? "" : deleted.join("")}</DeleteResult>`);
}

const queryValue = (ctx: Ctx, name: string) => ctx.target.query.find(([k]) => k === name)?.[1];

async function createMultipartUpload(ctx: Ctx): Promise<Response> {
  const bucket = requireBucket(ctx);
  const key = ctx.target.key!;
  if (Buffer.byteLength(key) > 1024) throw errors.keyTooLong();
  const algorithm = creationAlgorithm(ctx.header("x-amz-checksum-algorithm"), ctx.header("x-amz-checksum-type"));
  const uploadId = ctx.cfg.uploads.create({
    bucket,
    key,
    algorithm,
    contentType: ctx.header("content-type") ?? "binary/octet-stream",
    metadata: userMetadata(ctx),
  });
  const headers: Record<string, string> = algorithm ? { "x-amz-checksum-algorithm": algorithm, "x-amz-checksum-type": "COMPOSITE" } : {};
  return xmlResponse(200, initiateXml(bucket, key, uploadId), headers);
}

async function uploadPart(ctx: Ctx): Promise<Response> {
  const bucket = requireBucket(ctx);
  if (ctx.header("x-amz-copy-source") !== undefined) throw errors.notImplemented("UploadPartCopy");
  const partNumber = partNumberOf(queryValue(ctx, "partNumber"));
  const upload = ctx.cfg.uploads.get(queryValue(ctx, "uploadId") ?? "", bucket, ctx.target.key!);
  const { data } = ctx.payload;
  if (data.length > ctx.cfg.maxObjectBytes) throw errors.entityTooLarge(data.length, ctx.cfg.maxObjectBytes);
  const verified = verifyIntegrity(ctx.payload, ctx.header, ctx.headerNames, false);
  const etag = recordPart(upload, partNumber, data, verified);
  return new Response(null, {
    status: 200,
    headers: { etag: `"${etag}"`, ...(verified ? { [checksumHeader(verified.algorithm)]: verified.value } : {}) },
  });
}

async function completeMultipartUpload(ctx: Ctx): Promise<Response> {
  const bucket = requireBucket(ctx);
  const key = ctx.target.key!;
  const uploadId = queryValue(ctx, "uploadId") ?? "";
  const upload = ctx.cfg.uploads.get(uploadId, bucket, key);
  verifyIntegrity(ctx.payload, ctx.header, ctx.headerNames, false);
  const assembled = assemble(upload, parseCompleteRequest(ctx.payload.data.toString("utf8")), ctx.cfg.maxObjectBytes);
  const meta: ObjectMeta = {
    key,
    size: assembled.data.length,
    etag: assembled.etag,
    lastModified: Math.floor(ctx.cfg.now() / 1000) * 1000,
    contentType: upload.contentType,
    // An upload created without a checksum algorithm gets a full-object CRC64NVME, like a plain PutObject.
    checksum: assembled.checksum ?? { algorithm: "CRC64NVME", value: checksumValue("CRC64NVME", assembled.data) },
    checksumType: assembled.checksum ? "COMPOSITE" : undefined,
    metadata: upload.metadata,
  };
  await ctx.cfg.store.put(bucket, meta, assembled.data);
  ctx.cfg.uploads.remove(uploadId);
  return xmlResponse(200, completeXml(`/${bucket}/${key}`, bucket, key, assembled));
}

async function abortMultipartUpload(ctx: Ctx): Promise<Response> {
  const bucket = requireBucket(ctx);
  const uploadId = queryValue(ctx, "uploadId") ?? "";
  ctx.cfg.uploads.get(uploadId, bucket, ctx.target.key!);
  ctx.cfg.uploads.remove(uploadId);
  return new Response(null, { status: 204 });
}

async function runOperation(op: S3Operation, ctx: Ctx, c: { env: HttpBindings }): Promise<Response> {
  switch (op) {
    case "ListBuckets":
      return xmlResponse(200, listBucketsXml(ctx.cfg.store.listBuckets(), ctx.cfg.region));
    case "CreateBucket":
      return createBucket(ctx);
    case "HeadBucket":
      requireBucket(ctx);
      return new Response(null, { status: 200, headers: { "x-amz-bucket-region": ctx.cfg.region } });
    case "DeleteBucket":
      return deleteBucket(ctx);
    case "ListObjectsV2":
      return xmlResponse(200, listObjectsV2(ctx.cfg.store, requireBucket(ctx), ctx.target.query));
    case "DeleteObjects":
      return deleteObjects(ctx);
    case "PutObject":
      return putObject(ctx);
    case "GetObject":
      return getOrHeadObject(ctx, c, false);
    case "HeadObject":
      return getOrHeadObject(ctx, c, true);
    case "DeleteObject":
      return deleteObject(ctx);
    case "CreateMultipartUpload":
      return createMultipartUpload(ctx);
    case "UploadPart":
      return uploadPart(ctx);
    case "CompleteMultipartUpload":
      return completeMultipartUpload(ctx);
    case "AbortMultipartUpload":
      return abortMultipartUpload(ctx);
  }
}

/** Holds the request open until the client goes away (an abort, or the stand-in closing its connections). */
function hang(env: HttpBindings): Promise<Response> {
  return new Promise((resolve) => {
    const socket = env.incoming.socket;
    const done = () => resolve(RESPONSE_ALREADY_SENT);
    if (socket.destroyed) done();
    else socket.once("close", done);
  });
}

async function handle(c: { env: HttpBindings; req: { raw: Request } }, cfg: AppConfig, state: { op?: S3Operation }): Promise<Response> {
  const req = c.req.raw;
  const target = parseTarget(c.env.incoming.url ?? "/");
  const header: Headers = (name) => req.headers.get(name) ?? undefined;
  const headerNames = [...req.headers.keys()];
  const op = resolveOperation(req.method, target, header);
  state.op = op;
  const fault = cfg.faults.take(op);
  if (fault?.kind === "error")
    throw new S3Error(fault.status ?? 500, fault.code ?? "InternalError", fault.message ?? errors.internal().message);
  if (fault?.kind === "reset") {
    c.env.incoming.socket.destroy();
    return RESPONSE_ALREADY_SENT;
  }
  if (fault?.kind === "hang") return hang(c.env);
  const payloadHash = authenticate(req.method, target, header, headerNames, cfg);
  const declared = Number(header("x-amz-decoded-content-length") ?? header("content-length") ?? 0);
  if (declared > cfg.maxObjectBytes) throw errors.entityTooLarge(declared, cfg.maxObjectBytes);
  if ((op === "PutObject" || op === "UploadPart") && payloadHash !== STREAMING_UNSIGNED_TRAILER) {
    // Like S3: plain uploads need a length; HTTP chunked framing is accepted only for aws-chunked bodies.
    if (header("transfer-encoding") !== undefined) {
      const err = errors.notImplemented("Transfer-Encoding without aws-chunked");
      err.extra.Header = "Transfer-Encoding";
      throw err;
    }
    if (header("content-length") === undefined) throw errors.missingContentLength();
  }
  // Framing overhead of aws-chunked is small; the decoded size is checked exactly afterwards.
  const raw = await readBody(req.body, cfg.maxObjectBytes + 1024 * 1024);
  const corrupt = fault?.kind === "corrupt" && op === "PutObject" ? flipByte : undefined;
  const payload = decodePayload(raw, payloadHash, header, corrupt);
  return runOperation(op, { cfg, method: req.method, target, header, headerNames, fault, payload }, c);
}

function errorResponse(err: S3Error, method: string, resource: string, requestId: string, hostId: string): Response {
  // HEAD responses carry no body; the SDK then reports the status (NotFound, Forbidden…).
  if (method === "HEAD") return new Response(null, { status: err.status });
  return xmlResponse(err.status, errorXml(err, resource, requestId, hostId));
}

export function createS3App(cfg: AppConfig): Hono<Env> {
  const app = new Hono<Env>();
  app.all("*", async (c) => {
    const requestId = randomBytes(8).toString("hex").toUpperCase();
    const hostId = randomBytes(24).toString("base64");
    const state: { op?: S3Operation } = {};
    let res: Response;
    try {
      res = await handle(c, cfg, state);
    } catch (e) {
      if (!(e instanceof S3Error)) cfg.onInternalError(e);
      const err = e instanceof S3Error ? e : errors.internal();
      let resource = "/";
      try {
        resource = parseTarget(c.env.incoming.url ?? "/").resource;
      } catch {}
      res = errorResponse(err, c.req.method, resource, requestId, hostId);
    }
    const headers: Record<string, string> = {};
    for (const [k, v] of c.req.raw.headers) if (k !== "authorization") headers[k] = v;
    const sent = res === RESPONSE_ALREADY_SENT;
    const status = sent ? (c.env.outgoing.headersSent ? c.env.outgoing.statusCode : 0) : res.status;
    cfg.record({ op: state.op, method: c.req.method, url: c.env.incoming.url ?? "/", headers, status });
    if (sent) return res;
    res.headers.set("x-amz-request-id", requestId);
    res.headers.set("x-amz-id-2", hostId);
    res.headers.set("date", new Date(cfg.now()).toUTCString());
    res.headers.set("server", "openma-s3-standin");
    return res;
  });
  return app;
}
