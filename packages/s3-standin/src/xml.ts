/**
 * S3's XML: error bodies and the few documents the stand-in reads and writes.
 * Element names and order follow the S3 API reference so the official SDK's
 * deserializers see what they see from S3.
 */

export const S3_XMLNS = "http://s3.amazonaws.com/doc/2006-03-01/";
export const XML_DECLARATION = '<?xml version="1.0" encoding="UTF-8"?>\n';

/** An S3 error response: HTTP status, S3 error code and any extra elements S3 adds (Key, BucketName…). */
export class S3Error extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
    readonly extra: Record<string, string> = {},
  ) {
    super(message);
    this.name = "S3Error";
  }
}

export const errors = {
  accessDenied: () => new S3Error(403, "AccessDenied", "Access Denied"),
  authorizationHeaderMalformed: (detail: string) =>
    new S3Error(400, "AuthorizationHeaderMalformed", `The authorization header is malformed; ${detail}`),
  badDigest: (what: string) =>
    new S3Error(
      400,
      "BadDigest",
      what === "Content-MD5"
        ? "The Content-MD5 you specified did not match what we received."
        : `The ${what} you specified did not match the calculated checksum.`,
    ),
  bucketAlreadyOwnedByYou: (bucket: string) =>
    new S3Error(409, "BucketAlreadyOwnedByYou", "Your previous request to create the named bucket succeeded and you already own it.", {
      BucketName: bucket,
    }),
  bucketNotEmpty: (bucket: string) =>
    new S3Error(409, "BucketNotEmpty", "The bucket you tried to delete is not empty", { BucketName: bucket }),
  entityTooLarge: (size: number, max: number) =>
    new S3Error(400, "EntityTooLarge", "Your proposed upload exceeds the maximum allowed object size.", {
      ProposedSize: String(size),
      MaxSizeAllowed: String(max),
    }),
  incompleteBody: (detail = "You did not provide the number of bytes specified by the Content-Length HTTP header") =>
    new S3Error(400, "IncompleteBody", detail),
  internal: () => new S3Error(500, "InternalError", "We encountered an internal error. Please try again."),
  invalidAccessKeyId: (accessKeyId: string) =>
    new S3Error(403, "InvalidAccessKeyId", "The AWS Access Key Id you provided does not exist in our records.", {
      AWSAccessKeyId: accessKeyId,
    }),
  invalidArgument: (message: string, name: string, value: string) =>
    new S3Error(400, "InvalidArgument", message, { ArgumentName: name, ArgumentValue: value }),
  invalidBucketName: (bucket: string) =>
    new S3Error(400, "InvalidBucketName", "The specified bucket is not valid.", { BucketName: bucket }),
  invalidDigest: () => new S3Error(400, "InvalidDigest", "The Content-MD5 you specified was invalid."),
  invalidRange: (range: string, size: number) =>
    new S3Error(416, "InvalidRange", "The requested range is not satisfiable", { RangeRequested: range, ActualObjectSize: String(size) }),
  invalidRequest: (message: string) => new S3Error(400, "InvalidRequest", message),
  keyTooLong: () => new S3Error(400, "KeyTooLongError", "Your key is too long"),
  malformedTrailer: () =>
    new S3Error(
      400,
      "MalformedTrailerError",
      "The request contained trailing data that was not well-formed or did not conform to our published schema.",
    ),
  malformedXml: () =>
    new S3Error(400, "MalformedXML", "The XML you provided was not well-formed or did not validate against our published schema"),
  methodNotAllowed: (method: string) =>
    new S3Error(405, "MethodNotAllowed", "The specified method is not allowed against this resource.", {
      Method: method,
      ResourceType: "OBJECT",
    }),
  missingContentLength: () => new S3Error(411, "MissingContentLength", "You must provide the Content-Length HTTP header."),
  noSuchBucket: (bucket: string) => new S3Error(404, "NoSuchBucket", "The specified bucket does not exist", { BucketName: bucket }),
  noSuchKey: (key: string) => new S3Error(404, "NoSuchKey", "The specified key does not exist.", { Key: key }),
  notImplemented: (what: string) =>
    new S3Error(501, "NotImplemented", `A header you provided implies functionality that is not implemented (${what})`),
  preconditionFailed: (condition: string) =>
    new S3Error(412, "PreconditionFailed", "At least one of the pre-conditions you specified did not hold", { Condition: condition }),
  /** `serverTime` is ISO 8601, as S3 sends it: the SDK corrects its clock from it. */
  requestTimeTooSkewed: (requestTime: string, serverTime: string) =>
    new S3Error(403, "RequestTimeTooSkewed", "The difference between the request time and the current time is too large.", {
      RequestTime: requestTime,
      ServerTime: serverTime,
      MaxAllowedSkewMilliseconds: "900000",
    }),
  signatureDoesNotMatch: (extra: Record<string, string>) =>
    new S3Error(
      403,
      "SignatureDoesNotMatch",
      "The request signature we calculated does not match the signature you provided. Check your key and signing method.",
      extra,
    ),
  contentSha256Mismatch: (client: string, computed: string) =>
    new S3Error(400, "XAmzContentSHA256Mismatch", "The provided 'x-amz-content-sha256' header does not match what was computed.", {
      ClientComputedContentSHA256: client,
      S3ComputedContentSHA256: computed,
    }),
};

// Characters XML 1.0 cannot carry even as references are dropped rather than emitted invalid.
// biome-ignore lint/suspicious/noControlCharactersInRegex: these are exactly the characters to handle
const XML_SPECIAL = /[&<>"'\u0000-\u0008\u000b\u000c\u000e-\u001f]/g;

export function escapeXml(value: string): string {
  return value.replace(XML_SPECIAL, (ch) => {
    switch (ch) {
      case "&":
        return "&amp;";
      case "<":
        return "&lt;";
      case ">":
        return "&gt;";
      case '"':
        return "&quot;";
      case "'":
        return "&apos;";
      default:
        return "";
    }
  });
}

const ENTITIES: Record<string, string> = { amp: "&", lt: "<", gt: ">", quot: '"', apos: "'" };

/** Decodes the five predefined entities and numeric references; `undefined` on a malformed reference. */
export function unescapeXml(value: string): string | undefined {
  let bad = false;
  const out = value.replace(/&(#x[0-9a-fA-F]+|#[0-9]+|[a-z]+);|&/g, (whole, ref: string | undefined) => {
    if (!ref) {
      bad = true;
      return whole;
    }
    if (ref.startsWith("#")) {
      const code = ref[1] === "x" ? Number.parseInt(ref.slice(2), 16) : Number.parseInt(ref.slice(1), 10);
      if (!Number.isSafeInteger(code) || code > 0x10ffff) bad = true;
      return bad ? whole : String.fromCodePoint(code);
    }
    const ch = ENTITIES[ref];
    if (ch === undefined) bad = true;
    return ch ?? whole;
  });
  return bad ? undefined : out;
}

/** `<Name>value</Name>`, escaped; nothing for `undefined`. */
export function element(name: string, value: string | number | boolean | undefined): string {
  return value === undefined ? "" : `<${name}>${escapeXml(String(value))}</${name}>`;
}

export function errorXml(err: S3Error, resource: string, requestId: string, hostId: string): string {
  const extra = Object.entries(err.extra)
    .map(([k, v]) => element(k, v))
    .join("");
  return `${XML_DECLARATION}<Error>${element("Code", err.code)}${element("Message", err.message)}${extra}${element("Resource", resource)}${element("RequestId", requestId)}${element("HostId", hostId)}</Error>`;
}

/** S3's timestamp form in XML bodies: ISO 8601 with milliseconds. */
export function isoTime(ms: number): string {
  return new Date(ms).toISOString();
}

export interface DeleteRequest {
  quiet: boolean;
  keys: string[];
}

/**
 * Parses a DeleteObjects body. Only the elements S3 defines are read; anything
 * that is not a well-formed `<Delete>` document is MalformedXML.
 */
export function parseDeleteRequest(xml: string): DeleteRequest {
  const body = xml.replace(/^\uFEFF?\s*(<\?xml[^>]*\?>)?\s*/, "");
  const root = /^<Delete(\s+xmlns="[^"]*")?\s*>([\s\S]*)<\/Delete>\s*$/.exec(body);
  if (!root) throw errors.malformedXml();
  let inner = root[2]!;
  let quiet = false;
  const quietMatch = /<Quiet>\s*(true|false)\s*<\/Quiet>/.exec(inner);
  if (quietMatch) {
    quiet = quietMatch[1] === "true";
    inner = inner.replace(quietMatch[0], "");
  }
  const keys = repeatedElements(inner, /\s*<Object>([\s\S]*?)<\/Object>\s*/y).map(([, object]) => {
    const keyMatch = /^\s*<Key>([^<]*)<\/Key>\s*(<VersionId>[^<]*<\/VersionId>\s*)?$/.exec(object!);
    const key = keyMatch ? unescapeXml(keyMatch[1]!) : undefined;
    if (key === undefined) throw errors.malformedXml();
    return key;
  });
  // S3 caps one DeleteObjects call at 1,000 keys.
  if (keys.length === 0 || keys.length > 1000) throw errors.malformedXml();
  return { quiet, keys };
}

/**
 * Consecutive matches of the sticky `pattern` covering `inner` (whitespace
 * aside); anything between or after them is MalformedXML.
 */
export function repeatedElements(inner: string, pattern: RegExp): RegExpExecArray[] {
  const out: RegExpExecArray[] = [];
  let pos = 0;
  while (pos < inner.length) {
    pattern.lastIndex = pos;
    const m = pattern.exec(inner);
    if (!m) {
      if (inner.slice(pos).trim() === "") break;
      throw errors.malformedXml();
    }
    out.push(m);
    pos = pattern.lastIndex;
  }
  return out;
}

/** The optional CreateBucket body: a LocationConstraint, or nothing. */
export function parseCreateBucket(xml: string): { locationConstraint: string | undefined } {
  const body = xml.trim();
  if (body === "") return { locationConstraint: undefined };
  const m =
    /^(<\?xml[^>]*\?>)?\s*<CreateBucketConfiguration(\s+xmlns="[^"]*")?\s*>\s*(<LocationConstraint>([^<]*)<\/LocationConstraint>)?\s*<\/CreateBucketConfiguration>$/.exec(
      body,
    );
  if (!m) throw errors.malformedXml();
  return { locationConstraint: m[4] };
}
