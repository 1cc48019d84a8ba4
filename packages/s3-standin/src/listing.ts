/**
 * ListObjectsV2 and ListBuckets: parameters validated as S3 does, keys in
 * UTF-8 byte order, `delimiter` roll-up into CommonPrefixes (each counting
 * towards `max-keys`), and an opaque continuation token that resumes after the
 * last key or common prefix returned.
 */
import type { ObjectMeta, ObjectStore } from "./store.ts";
import { element, errors, isoTime, S3_XMLNS, XML_DECLARATION } from "./xml.ts";

const OWNER_ID = "75aa57f09aa0c8caeab4f8c24e99d10f8e7faeebf76c078efc7c6caea54ba06a";

interface Marker {
  /** The last key or common prefix returned. */
  k: string;
  /** Whether `k` is a common prefix: every key under it is skipped too. */
  p: boolean;
}

function encodeToken(m: Marker): string {
  return Buffer.from(JSON.stringify(m), "utf8").toString("base64");
}

function decodeToken(token: string): Marker {
  const bad = () => errors.invalidArgument("The continuation token provided is incorrect", "continuation-token", token);
  let parsed: unknown;
  try {
    parsed = JSON.parse(Buffer.from(token, "base64").toString("utf8"));
  } catch {
    throw bad();
  }
  const m = parsed as Partial<Marker> | null;
  if (typeof m?.k !== "string" || typeof m.p !== "boolean") throw bad();
  return { k: m.k, p: m.p };
}

/** `encoding-type=url`: like S3, `+` for space and `/` left readable. */
function urlEncode(value: string): string {
  return encodeURIComponent(value)
    .replace(/[!'()*]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`)
    .replace(/%2F/g, "/")
    .replace(/%20/g, "+");
}

function parseMaxKeys(value: string | undefined): number {
  if (value === undefined) return 1000;
  if (!/^\d{1,10}$/.test(value) || Number(value) > 2_147_483_647) {
    throw errors.invalidArgument("Provided max-keys not an integer or within integer range", "max-keys", value);
  }
  // S3 returns at most 1,000 keys per page whatever is asked.
  return Math.min(Number(value), 1000);
}

interface Page {
  contents: ObjectMeta[];
  prefixes: string[];
  truncated: boolean;
  last: Marker | undefined;
}

function collectPage(
  store: ObjectStore,
  bucket: string,
  prefix: string,
  delimiter: string | undefined,
  start: Marker | undefined,
  maxKeys: number,
): Page {
  const page: Page = { contents: [], prefixes: [], truncated: false, last: undefined };
  if (maxKeys === 0) return page;
  for (const meta of store.list(bucket, { prefix, after: start?.k })) {
    if (start?.p && meta.key.startsWith(start.k)) continue;
    const cut = delimiter ? meta.key.indexOf(delimiter, prefix.length) : -1;
    const commonPrefix = cut >= 0 ? meta.key.slice(0, cut + delimiter!.length) : undefined;
    if (commonPrefix !== undefined && page.last?.p && page.last.k === commonPrefix) continue;
    if (page.contents.length + page.prefixes.length === maxKeys) {
      page.truncated = true;
      break;
    }
    if (commonPrefix !== undefined) {
      page.prefixes.push(commonPrefix);
      page.last = { k: commonPrefix, p: true };
    } else {
      page.contents.push(meta);
      page.last = { k: meta.key, p: false };
    }
  }
  return page;
}

export function listObjectsV2(store: ObjectStore, bucket: string, query: [string, string][]): string {
  const q = new Map(query);
  const maxKeys = parseMaxKeys(q.get("max-keys"));
  const encodingType = q.get("encoding-type");
  if (encodingType !== undefined && encodingType !== "url") {
    throw errors.invalidArgument("Invalid Encoding Method specified in Request", "encoding-type", encodingType);
  }
  const prefix = q.get("prefix") ?? "";
  const delimiter = q.get("delimiter") || undefined;
  const token = q.get("continuation-token");
  const startAfter = q.get("start-after") || undefined;
  const fetchOwner = q.get("fetch-owner") === "true";
  const start = token !== undefined ? decodeToken(token) : startAfter !== undefined ? { k: startAfter, p: false } : undefined;
  const page = collectPage(store, bucket, prefix, delimiter, start, maxKeys);
  const enc = (v: string | undefined) => (v !== undefined && encodingType === "url" ? urlEncode(v) : v);
  const owner = fetchOwner ? `<Owner>${element("ID", OWNER_ID)}${element("DisplayName", "openma")}</Owner>` : "";
  const contents = page.contents
    .map(
      (m) =>
        `<Contents>${element("Key", enc(m.key))}${element("LastModified", isoTime(m.lastModified))}${element("ETag", `"${m.etag}"`)}` +
        `${element("ChecksumAlgorithm", m.checksum.algorithm)}${element("ChecksumType", "FULL_OBJECT")}${element("Size", m.size)}` +
        `${element("StorageClass", "STANDARD")}${owner}</Contents>`,
    )
    .join("");
  const prefixes = page.prefixes.map((p) => `<CommonPrefixes>${element("Prefix", enc(p))}</CommonPrefixes>`).join("");
  return (
    `${XML_DECLARATION}<ListBucketResult xmlns="${S3_XMLNS}">${element("Name", bucket)}${element("Prefix", enc(prefix))}` +
    `${element("ContinuationToken", token)}${element("NextContinuationToken", page.truncated && page.last ? encodeToken(page.last) : undefined)}` +
    `${element("KeyCount", page.contents.length + page.prefixes.length)}${element("MaxKeys", maxKeys)}${element("Delimiter", enc(delimiter))}` +
    `${element("EncodingType", encodingType)}${element("IsTruncated", page.truncated)}${element("StartAfter", enc(startAfter))}` +
    `${contents}${prefixes}</ListBucketResult>`
  );
}

export function listBucketsXml(buckets: { name: string; createdAt: number }[], region: string): string {
  const items = buckets
    .map(
      (b) =>
        `<Bucket>${element("Name", b.name)}${element("CreationDate", isoTime(b.createdAt))}${element("BucketRegion", region)}</Bucket>`,
    )
    .join("");
  return (
    `${XML_DECLARATION}<ListAllMyBucketsResult xmlns="${S3_XMLNS}"><Owner>${element("ID", OWNER_ID)}${element("DisplayName", "openma")}</Owner>` +
    `<Buckets>${items}</Buckets></ListAllMyBucketsResult>`
  );
}
