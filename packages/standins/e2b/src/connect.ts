/**
 * The Connect protocol (connectrpc.com/docs/protocol) with the JSON codec,
 * as envd serves it and `@connectrpc/connect-web` calls it: unary calls are
 * a plain JSON body answered with JSON (errors as an HTTP status and
 * `{"code","message"}`); server-streaming calls carry enveloped messages
 * (1 flag byte, 4-byte big-endian length, JSON) and end with an end-stream
 * envelope (flag 0x02) holding `{}` or `{"error": {...}}`.
 */

export type ConnectCode =
  | "canceled"
  | "unknown"
  | "invalid_argument"
  | "deadline_exceeded"
  | "not_found"
  | "already_exists"
  | "permission_denied"
  | "resource_exhausted"
  | "failed_precondition"
  | "aborted"
  | "out_of_range"
  | "unimplemented"
  | "internal"
  | "unavailable"
  | "data_loss"
  | "unauthenticated";

/** The protocol's HTTP status for each code (unary errors). */
export const HTTP_STATUS: Record<ConnectCode, number> = {
  canceled: 499,
  unknown: 500,
  invalid_argument: 400,
  deadline_exceeded: 504,
  not_found: 404,
  already_exists: 409,
  permission_denied: 403,
  resource_exhausted: 429,
  failed_precondition: 400,
  aborted: 409,
  out_of_range: 400,
  unimplemented: 501,
  internal: 500,
  unavailable: 503,
  data_loss: 500,
  unauthenticated: 401,
};

export class ConnectError extends Error {
  constructor(
    readonly code: ConnectCode,
    message: string,
  ) {
    super(message);
  }
}

export const END_STREAM = 0x02;

export function envelope(flags: number, message: unknown): Uint8Array {
  const json = Buffer.from(JSON.stringify(message));
  const out = Buffer.alloc(5 + json.length);
  out[0] = flags;
  out.writeUInt32BE(json.length, 1);
  json.copy(out, 5);
  return out;
}

/** The first enveloped message of a streaming request body. */
export function readEnvelope(body: Uint8Array): unknown {
  const bytes = Buffer.from(body);
  if (bytes.length < 5) throw new ConnectError("invalid_argument", "request body is not an enveloped message");
  const length = bytes.readUInt32BE(1);
  if ((bytes[0] as number) & 0x01) throw new ConnectError("unimplemented", "compressed messages are not supported");
  if (bytes.length < 5 + length) throw new ConnectError("invalid_argument", "truncated envelope");
  try {
    return JSON.parse(bytes.subarray(5, 5 + length).toString("utf8"));
  } catch {
    throw new ConnectError("invalid_argument", "the message is not valid JSON");
  }
}

export function endStream(error: ConnectError | null): Uint8Array {
  return envelope(END_STREAM, error === null ? {} : { error: { code: error.code, message: error.message } });
}

export function unaryError(error: ConnectError): Response {
  return new Response(JSON.stringify({ code: error.code, message: error.message }), {
    status: HTTP_STATUS[error.code],
    headers: { "Content-Type": "application/json" },
  });
}
