/**
 * Multipart uploads as S3 keeps them: an upload's parts are invisible until
 * CompleteMultipartUpload assembles them into one object, and an aborted
 * upload leaves nothing. Completion checks what S3 checks (ascending part
 * numbers, each part's ETag and checksum, 5 MiB for every part but the last)
 * and gives the object S3's composite ETag and checksum (`…-N`). Pending parts
 * are held in memory even when objects live in a directory (a test tool): a
 * restarted stand-in has forgotten them, as if they had been aborted.
 */
import { randomBytes } from "node:crypto";
import { CHECKSUM_ALGORITHMS, type ChecksumAlgorithm, DIGEST_BYTES, decodeDigest, digest, md5 } from "./checksums.ts";
import { element, errors, repeatedElements, S3_XMLNS, S3Error, unescapeXml, XML_DECLARATION } from "./xml.ts";

/** S3's floor for every part but the last, and its part-number range. */
export const MIN_PART_BYTES = 5 * 1024 * 1024;
export const MAX_PART_NUMBER = 10_000;

interface Part {
  data: Buffer;
  /** Hex MD5, without quotes. */
  etag: string;
  /** The part's verified checksum in the upload's algorithm (base64). */
  checksum: string | undefined;
}

export interface PendingUpload {
  bucket: string;
  key: string;
  /** Declared at creation: every part must then carry a checksum of this algorithm. */
  algorithm: ChecksumAlgorithm | undefined;
  contentType: string;
  metadata: Record<string, string>;
  parts: Map<number, Part>;
}

export const multipartErrors = {
  noSuchUpload: (uploadId: string) =>
    new S3Error(
      404,
      "NoSuchUpload",
      "The specified upload does not exist. The upload ID may be invalid, or the upload may have been aborted or completed.",
      { UploadId: uploadId },
    ),
  invalidPart: () =>
    new S3Error(
      400,
      "InvalidPart",
      "One or more of the specified parts could not be found.  The part may not have been uploaded, or the specified entity tag may not match the part's entity tag.",
    ),
  invalidPartOrder: () =>
    new S3Error(400, "InvalidPartOrder", "The list of parts was not in ascending order. Parts must be ordered by part number."),
  entityTooSmall: () => new S3Error(400, "EntityTooSmall", "Your proposed upload is smaller than the minimum allowed object size."),
};

export class MultipartUploads {
  private readonly uploads = new Map<string, PendingUpload>();

  get pending(): number {
    return this.uploads.size;
  }

  create(upload: Omit<PendingUpload, "parts">): string {
    const id = randomBytes(24).toString("base64url");
    this.uploads.set(id, { ...upload, parts: new Map() });
    return id;
  }

  /** The upload `id` of this bucket and key, or NoSuchUpload (S3 does not tell a wrong key from a wrong id). */
  get(id: string, bucket: string, key: string): PendingUpload {
    const upload = this.uploads.get(id);
    if (!upload || upload.bucket !== bucket || upload.key !== key) throw multipartErrors.noSuchUpload(id);
    return upload;
  }

  remove(id: string): void {
    this.uploads.delete(id);
  }
}

/** `x-amz-checksum-algorithm` of CreateMultipartUpload; composite checksums only (S3's full-object ones are CRC-only). */
export function creationAlgorithm(algorithm: string | undefined, checksumType: string | undefined): ChecksumAlgorithm | undefined {
  if (checksumType !== undefined && checksumType.toUpperCase() !== "COMPOSITE")
    throw errors.notImplemented("full-object multipart checksums");
  if (algorithm === undefined) return undefined;
  const upper = algorithm.toUpperCase() as ChecksumAlgorithm;
  if (!CHECKSUM_ALGORITHMS.includes(upper)) throw errors.invalidRequest("Checksum algorithm provided is unsupported.");
  return upper;
}

export function partNumberOf(value: string | undefined): number {
  const n = Number(value);
  if (value === undefined || !/^\d+$/.test(value) || n < 1 || n > MAX_PART_NUMBER) {
    throw errors.invalidArgument("Part number must be an integer between 1 and 10000, inclusive", "partNumber", value ?? "");
  }
  return n;
}

export function initiateXml(bucket: string, key: string, uploadId: string): string {
  return `${XML_DECLARATION}<InitiateMultipartUploadResult xmlns="${S3_XMLNS}">${element("Bucket", bucket)}${element("Key", key)}${element("UploadId", uploadId)}</InitiateMultipartUploadResult>`;
}

export interface CompletedPart {
  partNumber: number;
  etag: string;
  checksums: Map<ChecksumAlgorithm, string>;
}

const PART_CHECKSUM_ELEMENT = new Map(CHECKSUM_ALGORITHMS.map((a) => [`Checksum${a}`, a]));

/** Parses a CompleteMultipartUpload body; anything but a well-formed list of parts is MalformedXML. */
export function parseCompleteRequest(xml: string): CompletedPart[] {
  const body = xml.replace(/^\uFEFF?\s*(<\?xml[^>]*\?>)?\s*/, "");
  const root = /^<CompleteMultipartUpload(\s+xmlns="[^"]*")?\s*>([\s\S]*)<\/CompleteMultipartUpload>\s*$/.exec(body);
  if (!root) throw errors.malformedXml();
  const parts = repeatedElements(root[2]!, /\s*<Part>([\s\S]*?)<\/Part>\s*/y).map(([, part]) => parsePart(part!));
  if (parts.length === 0) throw errors.malformedXml();
  return parts;
}

function parsePart(inner: string): CompletedPart {
  const fields = new Map<string, string>();
  for (const [, name, raw] of repeatedElements(inner, /\s*<([A-Za-z0-9]+)>([^<]*)<\/\1>\s*/y)) {
    const value = unescapeXml(raw!);
    if (value === undefined || fields.has(name!)) throw errors.malformedXml();
    fields.set(name!, value.trim());
  }
  const checksums = new Map<ChecksumAlgorithm, string>();
  for (const [name, value] of fields) {
    const algorithm = PART_CHECKSUM_ELEMENT.get(name);
    if (algorithm) checksums.set(algorithm, value);
    else if (name !== "ETag" && name !== "PartNumber") throw errors.malformedXml();
  }
  const etag = fields.get("ETag");
  const number = fields.get("PartNumber");
  if (etag === undefined || number === undefined || !/^\d+$/.test(number)) throw errors.malformedXml();
  return { partNumber: Number(number), etag: etag.replace(/^"|"$/g, ""), checksums };
}

export interface AssembledObject {
  data: Buffer;
  /** `md5(md5(part 1) ‖ … ‖ md5(part N))-N`, hex. */
  etag: string;
  /** Composite `digest(digest(part 1) ‖ …)-N` in the upload's algorithm, or none when it declared none. */
  checksum: { algorithm: ChecksumAlgorithm; value: string } | undefined;
}

/** Checks the client's part list against the uploaded parts and joins them, as CompleteMultipartUpload does. */
export function assemble(upload: PendingUpload, list: CompletedPart[], maxObjectBytes: number): AssembledObject {
  const chosen: Part[] = [];
  let previous = 0;
  for (const item of list) {
    if (item.partNumber <= previous) throw multipartErrors.invalidPartOrder();
    previous = item.partNumber;
    const part = upload.parts.get(item.partNumber);
    if (!part || part.etag !== item.etag) throw multipartErrors.invalidPart();
    if (upload.algorithm) {
      const given = item.checksums.get(upload.algorithm);
      if (given === undefined) {
        throw errors.invalidRequest(
          `The upload was created using a ${upload.algorithm.toLowerCase()} checksum. The complete request must include the checksum for each part. It was missing for part ${item.partNumber} in the request.`,
        );
      }
      if (given !== part.checksum) throw multipartErrors.invalidPart();
    }
    chosen.push(part);
  }
  if (chosen.slice(0, -1).some((p) => p.data.length < MIN_PART_BYTES)) throw multipartErrors.entityTooSmall();
  const size = chosen.reduce((n, p) => n + p.data.length, 0);
  if (size > maxObjectBytes) throw errors.entityTooLarge(size, maxObjectBytes);
  const suffix = `-${chosen.length}`;
  const etag = md5(Buffer.concat(chosen.map((p) => Buffer.from(p.etag, "hex")))).toString("hex") + suffix;
  const algorithm = upload.algorithm;
  const checksum = algorithm
    ? {
        algorithm,
        value:
          digest(algorithm, Buffer.concat(chosen.map((p) => decodeDigest(p.checksum!, DIGEST_BYTES[algorithm])!))).toString("base64") +
          suffix,
      }
    : undefined;
  return { data: Buffer.concat(chosen.map((p) => p.data)), etag, checksum };
}

export function completeXml(location: string, bucket: string, key: string, assembled: AssembledObject): string {
  const checksum = assembled.checksum
    ? element(`Checksum${assembled.checksum.algorithm}`, assembled.checksum.value) + element("ChecksumType", "COMPOSITE")
    : "";
  return `${XML_DECLARATION}<CompleteMultipartUploadResult xmlns="${S3_XMLNS}">${element("Location", location)}${element("Bucket", bucket)}${element("Key", key)}${element("ETag", `"${assembled.etag}"`)}${checksum}</CompleteMultipartUploadResult>`;
}

/** Records a verified part (a part number uploaded again replaces the earlier one, as in S3). */
export function recordPart(
  upload: PendingUpload,
  partNumber: number,
  data: Buffer,
  verified: { algorithm: ChecksumAlgorithm; value: string } | undefined,
): string {
  if (upload.algorithm && verified?.algorithm !== upload.algorithm) {
    throw errors.invalidRequest(
      `Checksum Type mismatch occurred, expected checksum Type: ${upload.algorithm.toLowerCase()}, actual checksum Type: ${verified?.algorithm.toLowerCase() ?? "null"}`,
    );
  }
  const etag = md5(data).toString("hex");
  upload.parts.set(partNumber, { data, etag, checksum: verified?.value });
  return etag;
}
