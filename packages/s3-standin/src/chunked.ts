/**
 * `Content-Encoding: aws-chunked` bodies with unsigned chunks
 * (`x-amz-content-sha256: STREAMING-UNSIGNED-PAYLOAD-TRAILER`), which the AWS
 * SDK sends for streaming uploads so it can append the checksum it computed
 * while streaming as a trailer:
 *
 *   <hex size>\r\n<bytes>\r\n … 0\r\n<name>:<value>\r\n … \r\n
 */
import { errors } from "./xml.ts";

export interface ChunkedPayload {
  data: Buffer;
  /** Trailer headers, names lower-cased. */
  trailers: Map<string, string>;
}

const CRLF = Buffer.from("\r\n");

function lineAt(body: Buffer, pos: number): { line: string; next: number } {
  const end = body.indexOf(CRLF, pos);
  if (end < 0) throw errors.incompleteBody("The request body terminated unexpectedly");
  return { line: body.subarray(pos, end).toString("latin1"), next: end + 2 };
}

/** Decodes an unsigned aws-chunked body; malformed framing is an S3 error, never a crash. */
export function decodeAwsChunked(body: Buffer): ChunkedPayload {
  const parts: Buffer[] = [];
  let pos = 0;
  for (;;) {
    const { line, next } = lineAt(body, pos);
    // Signed streaming would carry `;chunk-signature=`; the caller routed only unsigned bodies here.
    if (!/^[0-9a-fA-F]{1,16}$/.test(line)) throw errors.incompleteBody(`Invalid chunk header: ${JSON.stringify(line.slice(0, 40))}`);
    const size = Number.parseInt(line, 16);
    pos = next;
    if (size === 0) break;
    if (pos + size + 2 > body.length) throw errors.incompleteBody("The request body terminated unexpectedly");
    parts.push(body.subarray(pos, pos + size));
    pos += size;
    if (!body.subarray(pos, pos + 2).equals(CRLF)) throw errors.incompleteBody("A chunk is longer than its declared size");
    pos += 2;
  }
  const trailers = new Map<string, string>();
  for (;;) {
    const { line, next } = lineAt(body, pos);
    pos = next;
    if (line === "") break;
    const colon = line.indexOf(":");
    if (colon <= 0) throw errors.malformedTrailer();
    trailers.set(line.slice(0, colon).trim().toLowerCase(), line.slice(colon + 1).trim());
  }
  if (pos !== body.length) throw errors.incompleteBody("Unexpected data after the final chunk");
  return { data: Buffer.concat(parts), trailers };
}

/** Encodes `data` the way the SDK does, for tests that need a hand-made aws-chunked body. */
export function encodeAwsChunked(data: Uint8Array, trailers: Record<string, string>, chunkSize = 64 * 1024): Buffer {
  const out: Buffer[] = [];
  for (let i = 0; i < data.length; i += chunkSize) {
    const chunk = data.subarray(i, i + chunkSize);
    out.push(Buffer.from(`${chunk.length.toString(16)}\r\n`), Buffer.from(chunk), CRLF);
  }
  out.push(Buffer.from("0\r\n"));
  for (const [k, v] of Object.entries(trailers)) out.push(Buffer.from(`${k}:${v}\r\n`));
  out.push(CRLF);
  return Buffer.concat(out);
}
