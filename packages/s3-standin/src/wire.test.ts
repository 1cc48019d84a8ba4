/**
 * Wire details the SDK hides or never produces: published SigV4 and CRC test
 * vectors, aws-chunked framing, hand-signed requests with malformed or
 * unsigned parts, and the exact XML documents.
 */
import { createHash } from "node:crypto";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { checksumValue, digest } from "./checksums.ts";
import { decodeAwsChunked, encodeAwsChunked } from "./chunked.ts";
import { type S3StandIn, startS3StandIn } from "./server.ts";
import { canonicalRequest, credentialScope, parseQuery, sign, signingKey, stringToSign } from "./sigv4.ts";
import { CREDENTIALS, rawRequest, xmlCode } from "./testkit.ts";
import { S3Error } from "./xml.ts";

describe("SigV4 against the examples published in the S3 API reference", () => {
  const secret = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY";
  const emptyHash = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
  const signFor = (method: string, rawPath: string, rawQuery: string, headers: Record<string, string>) => {
    const canonical = canonicalRequest({
      method,
      rawPath,
      query: parseQuery(rawQuery)!,
      header: (n) => headers[n],
      signedHeaders: Object.keys(headers).sort(),
      payloadHash: emptyHash,
    });
    const toSign = stringToSign("20130524T000000Z", credentialScope("20130524", "us-east-1", "s3"), canonical);
    return { toSign, signature: sign(signingKey(secret, "20130524", "us-east-1", "s3"), toSign) };
  };
  const base = { host: "examplebucket.s3.amazonaws.com", "x-amz-content-sha256": emptyHash, "x-amz-date": "20130524T000000Z" };

  it("GET Object with a Range header", () => {
    const { toSign, signature } = signFor("GET", "/test.txt", "", { ...base, range: "bytes=0-9" });
    expect(toSign.split("\n").at(-1)).toBe("7344ae5b7ee6c3e7e6b0fe0640412a37625d1fbfff95c48bbb2dc43964946972");
    expect(signature).toBe("f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41");
  });

  it("GET Bucket (list objects) with a query string", () => {
    expect(signFor("GET", "/", "max-keys=2&prefix=J", base).signature).toBe(
      "34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7",
    );
  });

  it("GET Bucket lifecycle with a value-less sub-resource", () => {
    expect(signFor("GET", "/", "lifecycle", base).signature).toBe("fea454ca298b7da1c68078a5d1bdbfbbe0d65c699e0f91ac7a200a0136783543");
  });
});

describe("checksums against their standard check values", () => {
  const check = Buffer.from("123456789");
  it.each([
    ["CRC32", "cbf43926"],
    ["CRC32C", "e3069283"],
    ["CRC64NVME", "ae8b14860a799888"],
    ["SHA1", "f7c3bc1d808e04732adf679965ccc34ca7ae3441"],
  ] as const)("%s", (algorithm, hex) => {
    expect(digest(algorithm, check).toString("hex")).toBe(hex);
  });

  it("encodes values as base64 of the big-endian digest, like the SDK", () => {
    expect(checksumValue("CRC32", Buffer.from("hello world"))).toBe("DUoRhQ==");
  });
});

describe("aws-chunked framing", () => {
  it("decodes the body the SDK sends for a streamed upload", () => {
    const body = Buffer.from("6\r\nhello \r\n5\r\nworld\r\n0\r\nx-amz-checksum-crc32:DUoRhQ==\r\n\r\n");
    const decoded = decodeAwsChunked(body);
    expect(decoded.data.toString()).toBe("hello world");
    expect([...decoded.trailers]).toEqual([["x-amz-checksum-crc32", "DUoRhQ=="]]);
  });

  it("round-trips what encodeAwsChunked produces", () => {
    const data = Buffer.alloc(200_000, "q");
    const decoded = decodeAwsChunked(encodeAwsChunked(data, { "x-amz-checksum-crc32": "x" }, 65_536));
    expect(decoded.data.equals(data)).toBe(true);
  });

  it.each([
    ["a truncated chunk", "b\r\nhello\r\n"],
    ["a chunk longer than declared", "3\r\nhello\r\n0\r\n\r\n"],
    ["a non-hex size", "zz\r\nhello\r\n0\r\n\r\n"],
    ["a signed chunk", "5;chunk-signature=abc\r\nhello\r\n0\r\n\r\n"],
    ["no final empty line", "5\r\nhello\r\n0\r\n"],
    ["data after the end", "5\r\nhello\r\n0\r\n\r\nextra"],
  ])("refuses %s as IncompleteBody", (_, body) => {
    expect(() => decodeAwsChunked(Buffer.from(body))).toThrow(expect.objectContaining({ code: "IncompleteBody" }));
  });

  it("refuses a malformed trailer line", () => {
    expect(() => decodeAwsChunked(Buffer.from("0\r\nno-colon-here\r\n\r\n"))).toThrow(S3Error);
  });
});

describe("raw requests", () => {
  const BUCKET = "wire";
  let standIn: S3StandIn;
  beforeEach(async () => {
    standIn = await startS3StandIn({ ...CREDENTIALS, buckets: [BUCKET] });
  });
  afterEach(() => standIn.close());

  it("answers an anonymous request with S3's AccessDenied XML and request id headers", async () => {
    const res = await rawRequest(standIn, "GET", `/${BUCKET}/k`, { anonymous: true });
    expect(res.status).toBe(403);
    expect(res.headers.get("content-type")).toBe("application/xml");
    const requestId = res.headers.get("x-amz-request-id");
    expect(res.headers.get("x-amz-id-2")).toBeTruthy();
    expect(res.text).toBe(
      `<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>AccessDenied</Code><Message>Access Denied</Message><Resource>/${BUCKET}/k</Resource>` +
        `<RequestId>${requestId}</RequestId><HostId>${res.headers.get("x-amz-id-2")}</HostId></Error>`,
    );
  });

  it("explains a signature mismatch with the string to sign, never the secret", async () => {
    const res = await rawRequest(standIn, "GET", `/${BUCKET}/k`, { secretAccessKey: "wrong" });
    expect(res.status).toBe(403);
    expect(xmlCode(res.text)).toBe("SignatureDoesNotMatch");
    expect(res.text).toContain(`<AWSAccessKeyId>${CREDENTIALS.accessKeyId}</AWSAccessKeyId>`);
    expect(res.text).toContain("<StringToSign>AWS4-HMAC-SHA256\n");
    expect(res.text).toContain(`<CanonicalRequest>GET\n/${BUCKET}/k\n`);
    expect(res.text).not.toContain(CREDENTIALS.secretAccessKey);
  });

  it("refuses x-amz-* headers that were not signed", async () => {
    const signedOnly = await rawRequest(standIn, "PUT", `/${BUCKET}/k`, { body: "x" });
    expect(signedOnly.status).toBe(200);
    const url = new URL(`/${BUCKET}/k`, standIn.endpoint);
    const { signRequest } = await import("./sigv4.ts");
    const headers = signRequest({
      method: "GET",
      url,
      headers: {},
      payloadHash: "UNSIGNED-PAYLOAD",
      ...CREDENTIALS,
      region: standIn.region,
      now: Date.now(),
    });
    delete headers.host;
    const res = await fetch(url, { headers: { ...headers, "x-amz-meta-sneaky": "1" } });
    const text = await res.text();
    expect(res.status).toBe(403);
    expect(text).toContain("<HeadersNotSigned>x-amz-meta-sneaky</HeadersNotSigned>");
  });

  it("checks the signed payload hash and accepts UNSIGNED-PAYLOAD", async () => {
    const mismatch = await rawRequest(standIn, "PUT", `/${BUCKET}/k`, { body: "actual", payloadHash: "0".repeat(64) });
    expect([mismatch.status, xmlCode(mismatch.text)]).toEqual([400, "XAmzContentSHA256Mismatch"]);
    const unsigned = await rawRequest(standIn, "PUT", `/${BUCKET}/k`, { body: "unsigned", payloadHash: "UNSIGNED-PAYLOAD" });
    expect(unsigned.status).toBe(200);
    const bogus = await rawRequest(standIn, "PUT", `/${BUCKET}/k`, { body: "x", payloadHash: "NOT-A-HASH" });
    expect([bogus.status, xmlCode(bogus.text)]).toEqual([400, "InvalidArgument"]);
    const signedChunks = await rawRequest(standIn, "PUT", `/${BUCKET}/k`, { body: "x", payloadHash: "STREAMING-AWS4-HMAC-SHA256-PAYLOAD" });
    expect([signedChunks.status, xmlCode(signedChunks.text)]).toEqual([501, "NotImplemented"]);
  });

  it("verifies aws-chunked trailers and the decoded length", async () => {
    const data = Buffer.from("chunked by hand");
    const send = (body: Buffer, extra: Record<string, string> = {}) =>
      rawRequest(standIn, "PUT", `/${BUCKET}/chunked`, {
        body,
        payloadHash: "STREAMING-UNSIGNED-PAYLOAD-TRAILER",
        headers: {
          "content-encoding": "aws-chunked",
          "x-amz-decoded-content-length": String(data.length),
          "x-amz-trailer": "x-amz-checksum-crc32c",
          ...extra,
        },
      });
    const good = await send(encodeAwsChunked(data, { "x-amz-checksum-crc32c": checksumValue("CRC32C", data) }, 4));
    expect(good.status).toBe(200);
    expect(good.headers.get("x-amz-checksum-crc32c")).toBe(checksumValue("CRC32C", data));
    const wrong = await send(encodeAwsChunked(data, { "x-amz-checksum-crc32c": checksumValue("CRC32C", Buffer.from("other")) }));
    expect([wrong.status, xmlCode(wrong.text)]).toEqual([400, "BadDigest"]);
    const missing = await send(encodeAwsChunked(data, {}));
    expect([missing.status, xmlCode(missing.text)]).toEqual([400, "MalformedTrailerError"]);
    const undeclared = await send(encodeAwsChunked(data, { "x-amz-checksum-sha1": checksumValue("SHA1", data) }));
    expect([undeclared.status, xmlCode(undeclared.text)]).toEqual([400, "MalformedTrailerError"]);
    const short = await send(encodeAwsChunked(data, { "x-amz-checksum-crc32c": checksumValue("CRC32C", data) }), {
      "x-amz-decoded-content-length": "3",
    });
    expect([short.status, xmlCode(short.text)]).toEqual([400, "IncompleteBody"]);
    const notChunked = await send(encodeAwsChunked(data, {}), { "content-encoding": "gzip" });
    expect([notChunked.status, xmlCode(notChunked.text)]).toEqual([400, "InvalidArgument"]);
  });

  it("refuses two checksums at once and a checksum algorithm without a value", async () => {
    const body = Buffer.from("x");
    const two = await rawRequest(standIn, "PUT", `/${BUCKET}/k`, {
      body,
      headers: { "x-amz-checksum-crc32": checksumValue("CRC32", body), "x-amz-checksum-sha1": checksumValue("SHA1", body) },
    });
    expect([two.status, xmlCode(two.text)]).toEqual([400, "InvalidRequest"]);
    const bare = await rawRequest(standIn, "PUT", `/${BUCKET}/k`, { body, headers: { "x-amz-sdk-checksum-algorithm": "CRC32" } });
    expect([bare.status, xmlCode(bare.text)]).toEqual([400, "InvalidRequest"]);
  });

  it("requires an integrity header on DeleteObjects and well-formed XML", async () => {
    const xml = `<Delete><Object><Key>a</Key></Object></Delete>`;
    const unprotected = await rawRequest(standIn, "POST", `/${BUCKET}?delete`, { body: xml });
    expect([unprotected.status, xmlCode(unprotected.text)]).toEqual([400, "InvalidRequest"]);
    const malformed = "<Delete><Object><Key>a</Object></Delete>";
    const bad = await rawRequest(standIn, "POST", `/${BUCKET}?delete`, {
      body: malformed,
      headers: { "content-md5": digestB64("md5", malformed) },
    });
    expect([bad.status, xmlCode(bad.text)]).toEqual([400, "MalformedXML"]);
  });

  it("lists with the XML layout S3 uses", async () => {
    await rawRequest(standIn, "PUT", `/${BUCKET}/p/a%26b`, { body: "12345" });
    await rawRequest(standIn, "PUT", `/${BUCKET}/p/z/deep`, { body: "1" });
    const res = await rawRequest(standIn, "GET", `/${BUCKET}?list-type=2&prefix=p%2F&delimiter=%2F`);
    expect(res.status).toBe(200);
    const text = res.text.replace(/<LastModified>[^<]+<\/LastModified>/, "<LastModified>T</LastModified>");
    expect(text).toBe(
      `<?xml version="1.0" encoding="UTF-8"?>\n<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">` +
        `<Name>${BUCKET}</Name><Prefix>p/</Prefix><KeyCount>2</KeyCount><MaxKeys>1000</MaxKeys><Delimiter>/</Delimiter>` +
        `<IsTruncated>false</IsTruncated><Contents><Key>p/a&amp;b</Key><LastModified>T</LastModified>` +
        `<ETag>&quot;827ccb0eea8a706c4c34a16891f84e7b&quot;</ETag><ChecksumAlgorithm>CRC64NVME</ChecksumAlgorithm>` +
        `<ChecksumType>FULL_OBJECT</ChecksumType><Size>5</Size><StorageClass>STANDARD</StorageClass></Contents>` +
        `<CommonPrefixes><Prefix>p/z/</Prefix></CommonPrefixes></ListBucketResult>`,
    );
    expect(res.text).toMatch(/<LastModified>\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.000Z<\/LastModified>/);
    const encoded = await rawRequest(standIn, "GET", `/${BUCKET}?list-type=2&encoding-type=url`);
    expect(encoded.text).toContain("<Key>p/a%26b</Key>");
    expect(encoded.text).toContain("<EncodingType>url</EncodingType>");
  });

  it("validates list parameters", async () => {
    const badMax = await rawRequest(standIn, "GET", `/${BUCKET}?list-type=2&max-keys=abc`);
    expect([badMax.status, xmlCode(badMax.text)]).toEqual([400, "InvalidArgument"]);
    const badEncoding = await rawRequest(standIn, "GET", `/${BUCKET}?list-type=2&encoding-type=base64`);
    expect([badEncoding.status, xmlCode(badEncoding.text)]).toEqual([400, "InvalidArgument"]);
    const capped = await rawRequest(standIn, "GET", `/${BUCKET}?list-type=2&max-keys=99999`);
    expect(capped.text).toContain("<MaxKeys>1000</MaxKeys>");
  });

  it("says NotImplemented for what the stand-in does not do, rather than misbehaving", async () => {
    const notDone = [`/${BUCKET}/k?tagging`, `/${BUCKET}?uploads`, `/${BUCKET}/k?uploadId=u`, `/${BUCKET}/k?partNumber=1`, `/${BUCKET}`];
    for (const path of [...notDone, `/${BUCKET}/k?X-Amz-Signature=abc`]) {
      const res = await rawRequest(standIn, "GET", path, { anonymous: path.includes("X-Amz-Signature") });
      expect([path, res.status, xmlCode(res.text)]).toEqual([path, 501, "NotImplemented"]);
    }
    const copy = await rawRequest(standIn, "PUT", `/${BUCKET}/k`, { headers: { "x-amz-copy-source": `/${BUCKET}/other` } });
    expect([copy.status, xmlCode(copy.text)]).toEqual([501, "NotImplemented"]);
    const patch = await rawRequest(standIn, "PATCH", `/${BUCKET}/k`);
    expect([patch.status, xmlCode(patch.text)]).toEqual([405, "MethodNotAllowed"]);
  });

  it("answers HEAD errors with a status and no body", async () => {
    const res = await rawRequest(standIn, "HEAD", `/${BUCKET}/missing`);
    expect(res.status).toBe(404);
    expect(res.text).toBe("");
  });

  it("refuses HTTP chunked framing on a plain (not aws-chunked) PUT, as S3 does", async () => {
    const url = new URL(`/${BUCKET}/k`, standIn.endpoint);
    const { signRequest } = await import("./sigv4.ts");
    const headers = signRequest({
      method: "PUT",
      url,
      headers: {},
      payloadHash: "UNSIGNED-PAYLOAD",
      ...CREDENTIALS,
      region: standIn.region,
      now: Date.now(),
    });
    delete headers.host;
    const stream = new ReadableStream({
      start(c) {
        c.enqueue(new TextEncoder().encode("streamed without length"));
        c.close();
      },
    });
    const res = await fetch(url, { method: "PUT", headers, body: stream, duplex: "half" } as RequestInit);
    // Without a length fetch sends Transfer-Encoding: chunked.
    const text = await res.text();
    expect([res.status, xmlCode(text)]).toEqual([501, "NotImplemented"]);
    expect(text).toContain("<Header>Transfer-Encoding</Header>");
  });
});

function digestB64(algorithm: "md5", data: string): string {
  return createHash(algorithm).update(data).digest("base64");
}
