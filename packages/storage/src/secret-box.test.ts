import { randomBytes } from "node:crypto";
import { describe, expect, it } from "vitest";
import { decodeSecretKey, generateSecretKey, isSealed, SecretBox, SecretBoxError, secretKeyId } from "./secret-box.ts";

const KEY_A = randomBytes(32);
const KEY_B = randomBytes(32);
const AAD = "vault_credentials.secret:vcrd_1";
const PLAIN = '{"token":"secret-token-ü-🔑"}';

function failure(fn: () => unknown): SecretBoxError {
  try {
    fn();
  } catch (err) {
    expect(err).toBeInstanceOf(SecretBoxError);
    return err as SecretBoxError;
  }
  throw new Error("expected a SecretBoxError");
}

/** Splits a sealed value into its four fields and the decoded payload. */
function parts(sealed: string) {
  const [prefix, version, keyId, payload] = sealed.split(":") as [string, string, string, string];
  return { prefix, version, keyId, payload, bytes: Buffer.from(payload, "base64url") };
}

function flipByte(sealed: string, index: (length: number) => number): string {
  const p = parts(sealed);
  const bytes = Buffer.from(p.bytes);
  const i = index(bytes.length);
  bytes[i] = bytes[i]! ^ 0x01;
  return [p.prefix, p.version, p.keyId, bytes.toString("base64url")].join(":");
}

describe("SecretBox", () => {
  const box = new SecretBox(KEY_A);

  it("round-trips text, with a fresh nonce every time", () => {
    const a = box.seal(PLAIN, AAD);
    const b = box.seal(PLAIN, AAD);
    expect(a).not.toBe(b);
    expect(box.open(a, AAD)).toBe(PLAIN);
    expect(box.open(b, AAD)).toBe(PLAIN);
    expect(box.open(box.seal("", AAD), AAD)).toBe("");
  });

  it("writes the versioned format: prefix, version, key id, base64url(nonce | ciphertext | tag)", () => {
    const sealed = box.seal(PLAIN, AAD);
    expect(isSealed(sealed)).toBe(true);
    expect(isSealed(PLAIN)).toBe(false);
    const p = parts(sealed);
    expect(p.prefix).toBe("openma-sb");
    expect(p.version).toBe("v1");
    expect(p.keyId).toBe(secretKeyId(KEY_A));
    expect(p.keyId).toMatch(/^[0-9a-f]{16}$/);
    expect(p.payload).toMatch(/^[A-Za-z0-9_-]+$/);
    expect(p.bytes.length).toBe(12 + Buffer.byteLength(PLAIN) + 16);
    expect(sealed).not.toContain("secret-token");
    expect(sealed).not.toContain(KEY_A.toString("base64"));
    expect(sealed.startsWith(box.currentPrefix)).toBe(true);
    expect(box.sealedWithCurrentKey(sealed)).toBe(true);
  });

  it("refuses other associated data: a value copied to another row does not open", () => {
    const sealed = box.seal(PLAIN, AAD);
    const err = failure(() => box.open(sealed, "vault_credentials.secret:vcrd_2"));
    expect(err.reason).toBe("authentication_failed");
    expect(err.message).toMatch(/altered or belongs to another record/);
  });

  it("refuses a wrong key with the same id, and names an unknown key id", () => {
    const sealed = box.seal(PLAIN, AAD);
    expect(failure(() => new SecretBox(KEY_B).open(sealed, AAD))).toMatchObject({ reason: "unknown_key" });
    expect(failure(() => new SecretBox(KEY_B).open(sealed, AAD)).message).toContain(secretKeyId(KEY_A));
    // Relabelled to the other key's id: the key id is authenticated, and the key is wrong.
    const relabelled = sealed.replace(secretKeyId(KEY_A), secretKeyId(KEY_B));
    expect(failure(() => new SecretBox(KEY_B, [KEY_A]).open(relabelled, AAD)).reason).toBe("authentication_failed");
  });

  it("detects tampering with the nonce, the ciphertext and the tag", () => {
    const sealed = box.seal(PLAIN, AAD);
    expect(
      failure(() =>
        box.open(
          flipByte(sealed, () => 0),
          AAD,
        ),
      ).reason,
    ).toBe("authentication_failed");
    expect(
      failure(() =>
        box.open(
          flipByte(sealed, () => 11),
          AAD,
        ),
      ).reason,
    ).toBe("authentication_failed");
    expect(
      failure(() =>
        box.open(
          flipByte(sealed, () => 12),
          AAD,
        ),
      ).reason,
    ).toBe("authentication_failed");
    expect(
      failure(() =>
        box.open(
          flipByte(sealed, (n) => n - 17),
          AAD,
        ),
      ).reason,
    ).toBe("authentication_failed");
    expect(
      failure(() =>
        box.open(
          flipByte(sealed, (n) => n - 16),
          AAD,
        ),
      ).reason,
    ).toBe("authentication_failed");
    expect(
      failure(() =>
        box.open(
          flipByte(sealed, (n) => n - 1),
          AAD,
        ),
      ).reason,
    ).toBe("authentication_failed");
    // Truncated tag, dropped ciphertext byte, appended byte.
    const p = parts(sealed);
    const cut = (bytes: Buffer) => [p.prefix, p.version, p.keyId, bytes.toString("base64url")].join(":");
    expect(failure(() => box.open(cut(p.bytes.subarray(0, p.bytes.length - 1)), AAD)).reason).toBe("authentication_failed");
    expect(failure(() => box.open(cut(Buffer.concat([p.bytes.subarray(0, 12), p.bytes.subarray(13)])), AAD)).reason).toBe(
      "authentication_failed",
    );
    expect(failure(() => box.open(cut(Buffer.concat([p.bytes, Buffer.from([0])])), AAD)).reason).toBe("authentication_failed");
  });

  it("detects tampering with the prefix, version, key id and encoding", () => {
    const sealed = box.seal(PLAIN, AAD);
    const p = parts(sealed);
    expect(failure(() => box.open(sealed.replace("openma-sb:", "openma-sx:"), AAD)).reason).toBe("malformed");
    expect(failure(() => box.open(sealed.replace(":v1:", ":v2:"), AAD)).reason).toBe("unsupported_version");
    expect(failure(() => box.open(sealed.replace(p.keyId, "0".repeat(16)), AAD)).reason).toBe("unknown_key");
    expect(failure(() => box.open(sealed.replace(p.keyId, "XYZ"), AAD)).reason).toBe("malformed");
    expect(failure(() => box.open(`${sealed}:extra`, AAD)).reason).toBe("malformed");
    expect(failure(() => box.open(`${sealed}=`, AAD)).reason).toBe("malformed");
    expect(failure(() => box.open(sealed.replace(p.payload, p.payload.replace(/[A-Za-z0-9]/, "+")), AAD)).reason).toBe("malformed");
    expect(failure(() => box.open(`openma-sb:v1:${p.keyId}:${"A".repeat(30)}`, AAD)).reason).toBe("malformed");
    expect(failure(() => box.open(PLAIN, AAD)).reason).toBe("malformed");
  });

  it("never puts the plaintext, the key or the ciphertext in an error message", () => {
    const sealed = box.seal(PLAIN, AAD);
    const messages = [
      failure(() => box.open(sealed, "other")).message,
      failure(() => new SecretBox(KEY_B).open(sealed, AAD)).message,
      failure(() =>
        box.open(
          flipByte(sealed, () => 20),
          AAD,
        ),
      ).message,
    ];
    for (const m of messages) {
      expect(m).not.toContain("secret-token");
      expect(m).not.toContain(parts(sealed).payload);
      expect(m).not.toContain(KEY_A.toString("base64"));
    }
  });

  it("rotates: seals with the current key, opens with any configured key", () => {
    const old = new SecretBox(KEY_A);
    const rotated = new SecretBox(KEY_B, [KEY_A]);
    const before = old.seal(PLAIN, AAD);
    expect(rotated.open(before, AAD)).toBe(PLAIN);
    expect(rotated.sealedWithCurrentKey(before)).toBe(false);
    const after = rotated.seal(PLAIN, AAD);
    expect(parts(after).keyId).toBe(secretKeyId(KEY_B));
    expect(rotated.sealedWithCurrentKey(after)).toBe(true);
    expect(rotated.keyIds).toEqual([secretKeyId(KEY_B), secretKeyId(KEY_A)]);
    // The retired key alone cannot open what the new key sealed.
    expect(failure(() => old.open(after, AAD)).reason).toBe("unknown_key");
  });

  it("takes keys as base64 of exactly 32 bytes and never echoes a bad one", () => {
    const generated = generateSecretKey();
    expect(decodeSecretKey(generated)).toHaveLength(32);
    expect(decodeSecretKey(KEY_A.toString("base64url")).equals(KEY_A)).toBe(true);
    const a = SecretBox.fromBase64(KEY_A.toString("base64"), [KEY_B.toString("base64")]);
    expect(a.currentKeyId).toBe(secretKeyId(KEY_A));
    const short = randomBytes(16).toString("base64");
    expect(() => decodeSecretKey(short)).toThrow(/32 bytes \(this one decodes to 16\)/);
    const bad = "not base64 at all!";
    let message = "";
    try {
      decodeSecretKey(bad);
    } catch (err) {
      message = (err as Error).message;
    }
    expect(message).toMatch(/base64 of 32 bytes/);
    expect(message).not.toContain(bad);
    expect(() => new SecretBox(randomBytes(31))).toThrow(/32 bytes/);
  });
});
