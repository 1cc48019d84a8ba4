/**
 * The integrity checksums S3 accepts on uploads (`x-amz-checksum-*`, as a
 * header or an aws-chunked trailer) and `Content-MD5`. Values travel as the
 * base64 of the big-endian digest, exactly as S3 and the AWS SDKs encode them.
 */
import { createHash } from "node:crypto";

export const CHECKSUM_ALGORITHMS = ["CRC32", "CRC32C", "CRC64NVME", "SHA1", "SHA256"] as const;
export type ChecksumAlgorithm = (typeof CHECKSUM_ALGORITHMS)[number];

/** `x-amz-checksum-crc32` and friends. */
export function checksumHeader(algorithm: ChecksumAlgorithm): string {
  return `x-amz-checksum-${algorithm.toLowerCase()}`;
}

export function algorithmOfHeader(name: string): ChecksumAlgorithm | undefined {
  return CHECKSUM_ALGORITHMS.find((a) => checksumHeader(a) === name.toLowerCase());
}

/** Digest length in bytes: a value that does not decode to this length is malformed, not merely wrong. */
export const DIGEST_BYTES: Record<ChecksumAlgorithm, number> = { CRC32: 4, CRC32C: 4, CRC64NVME: 8, SHA1: 20, SHA256: 32 };

function crc32Table(poly: number): Uint32Array {
  const table = new Uint32Array(256);
  for (let n = 0; n < 256; n++) {
    let c = n;
    for (let k = 0; k < 8; k++) c = c & 1 ? (c >>> 1) ^ poly : c >>> 1;
    table[n] = c >>> 0;
  }
  return table;
}

const CRC32_TABLE = crc32Table(0xedb88320);
const CRC32C_TABLE = crc32Table(0x82f63b78);

function crc32With(table: Uint32Array, data: Uint8Array): Buffer {
  let crc = 0xffffffff;
  for (let i = 0; i < data.length; i++) crc = table[(crc ^ data[i]!) & 0xff]! ^ (crc >>> 8);
  const out = Buffer.alloc(4);
  out.writeUInt32BE((crc ^ 0xffffffff) >>> 0);
  return out;
}

// CRC-64/NVME (reflected polynomial 0x9a6c9329ac4bc9b5), kept as two 32-bit
// halves so the per-byte loop stays in fast integer arithmetic.
const CRC64_LO = new Uint32Array(256);
const CRC64_HI = new Uint32Array(256);
{
  const poly = 0x9a6c9329ac4bc9b5n;
  for (let n = 0; n < 256; n++) {
    let c = BigInt(n);
    for (let k = 0; k < 8; k++) c = c & 1n ? (c >> 1n) ^ poly : c >> 1n;
    CRC64_LO[n] = Number(c & 0xffffffffn);
    CRC64_HI[n] = Number(c >> 32n);
  }
}

function crc64nvme(data: Uint8Array): Buffer {
  let lo = 0xffffffff;
  let hi = 0xffffffff;
  for (let i = 0; i < data.length; i++) {
    const idx = (lo ^ data[i]!) & 0xff;
    lo = (CRC64_LO[idx]! ^ ((lo >>> 8) | (hi << 24))) >>> 0;
    hi = (CRC64_HI[idx]! ^ (hi >>> 8)) >>> 0;
  }
  const out = Buffer.alloc(8);
  out.writeUInt32BE((hi ^ 0xffffffff) >>> 0, 0);
  out.writeUInt32BE((lo ^ 0xffffffff) >>> 0, 4);
  return out;
}

export function digest(algorithm: ChecksumAlgorithm, data: Uint8Array): Buffer {
  switch (algorithm) {
    case "CRC32":
      return crc32With(CRC32_TABLE, data);
    case "CRC32C":
      return crc32With(CRC32C_TABLE, data);
    case "CRC64NVME":
      return crc64nvme(data);
    case "SHA1":
      return createHash("sha1").update(data).digest();
    case "SHA256":
      return createHash("sha256").update(data).digest();
  }
}

/** The header value S3 would return for `data`. */
export function checksumValue(algorithm: ChecksumAlgorithm, data: Uint8Array): string {
  return digest(algorithm, data).toString("base64");
}

/** Decodes a base64 digest of `bytes` bytes; `undefined` when it is not one. */
export function decodeDigest(value: string, bytes: number): Buffer | undefined {
  if (!/^[A-Za-z0-9+/]+={0,2}$/.test(value)) return undefined;
  const raw = Buffer.from(value, "base64");
  return raw.length === bytes && raw.toString("base64") === value ? raw : undefined;
}

export function md5(data: Uint8Array): Buffer {
  return createHash("md5").update(data).digest();
}

export function sha256Hex(data: Uint8Array | string): string {
  return createHash("sha256").update(data).digest("hex");
}
