/**
 * Authenticated encryption for secrets kept in the database (vault credential
 * secrets): AES-256-GCM, a fresh random 96-bit nonce per value, and a
 * self-describing text form
 *
 *     openma-sb:v1:<key id>:<base64url(nonce | ciphertext | tag)>
 *
 * The caller's associated data (e.g. the row's id) is authenticated with the
 * value, so a ciphertext copied to another row does not open. The key id
 * names which configured key sealed a value: values seal with the current key
 * and open with any configured one, which is how keys rotate.
 *
 * Nothing here logs, and no error message carries a key, a plaintext or a
 * ciphertext.
 */
import { createCipheriv, createDecipheriv, createHash, randomBytes } from "node:crypto";

/** Every sealed value starts with this; anything else is a legacy plaintext value. */
export const SEALED_PREFIX = "openma-sb:";
const VERSION = "v1";
const KEY_BYTES = 32;
const NONCE_BYTES = 12;
const TAG_BYTES = 16;
const BASE64URL = /^[A-Za-z0-9_-]+$/;
const KEY_ID = /^[0-9a-f]{16}$/;

export type SecretBoxFailure = "malformed" | "unsupported_version" | "unknown_key" | "authentication_failed";

/** A value could not be opened. The message names the reason and key id, never the value or a key. */
export class SecretBoxError extends Error {
  constructor(
    readonly reason: SecretBoxFailure,
    message: string,
  ) {
    super(message);
    this.name = "SecretBoxError";
  }
}

/** Whether `text` is in the sealed form (of any version), as opposed to legacy plaintext. */
export function isSealed(text: string): boolean {
  return text.startsWith(SEALED_PREFIX);
}

/**
 * Decodes a configured key (standard or URL-safe base64 of exactly 32 bytes).
 * The error never repeats the input: it is a secret.
 */
export function decodeSecretKey(base64: string): Buffer {
  const trimmed = base64.trim();
  if (!/^[A-Za-z0-9+/_-]+={0,2}$/.test(trimmed)) throw new Error("a secret key must be base64 of 32 bytes");
  const key = Buffer.from(trimmed.replace(/-/g, "+").replace(/_/g, "/"), "base64");
  if (key.length !== KEY_BYTES) throw new Error(`a secret key must be base64 of 32 bytes (this one decodes to ${key.length})`);
  return key;
}

/** A fresh random key, base64 (what `OPENMA_SECRET_KEY` holds). */
export function generateSecretKey(): string {
  return randomBytes(KEY_BYTES).toString("base64");
}

/**
 * The public name of a key: a truncated hash under a fixed label, so
 * operators configure keys alone and a key id reveals nothing about its key.
 */
export function secretKeyId(key: Buffer): string {
  return createHash("sha256").update("openma secret-box key id\0").update(key).digest("hex").slice(0, 16);
}

export class SecretBox {
  /** The key id new values are sealed with. */
  readonly currentKeyId: string;
  private readonly keys = new Map<string, Buffer>();

  /**
   * `current` seals; `previous` keys only open (values sealed before a
   * rotation). Keys are raw 32-byte buffers; see `SecretBox.fromBase64`.
   */
  constructor(current: Buffer, previous: readonly Buffer[] = []) {
    for (const key of [current, ...previous]) {
      if (key.length !== KEY_BYTES) throw new Error(`a secret key must be ${KEY_BYTES} bytes`);
      const id = secretKeyId(key);
      if (!this.keys.has(id)) this.keys.set(id, Buffer.from(key));
    }
    this.currentKeyId = secretKeyId(current);
  }

  static fromBase64(current: string, previous: readonly string[] = []): SecretBox {
    return new SecretBox(decodeSecretKey(current), previous.map(decodeSecretKey));
  }

  /** Ids of every key this box opens with, the current one first. */
  get keyIds(): string[] {
    return [...this.keys.keys()];
  }

  seal(plaintext: string, aad: string): string {
    const key = this.keys.get(this.currentKeyId)!;
    const nonce = randomBytes(NONCE_BYTES);
    const cipher = createCipheriv("aes-256-gcm", key, nonce, { authTagLength: TAG_BYTES });
    cipher.setAAD(associatedData(this.currentKeyId, aad));
    const ciphertext = Buffer.concat([cipher.update(plaintext, "utf8"), cipher.final()]);
    const payload = Buffer.concat([nonce, ciphertext, cipher.getAuthTag()]).toString("base64url");
    return `${SEALED_PREFIX}${VERSION}:${this.currentKeyId}:${payload}`;
  }

  /** Opens a sealed value with the key its id names; throws SecretBoxError on any mismatch. */
  open(text: string, aad: string): string {
    if (!isSealed(text)) throw new SecretBoxError("malformed", "not a sealed secret");
    const parts = text.slice(SEALED_PREFIX.length).split(":");
    if (parts[0] !== VERSION) throw new SecretBoxError("unsupported_version", "sealed secret has an unsupported format version");
    const [, keyId, payload] = parts;
    if (parts.length !== 3 || !keyId || !KEY_ID.test(keyId) || !payload || !BASE64URL.test(payload)) {
      throw new SecretBoxError("malformed", "sealed secret is malformed");
    }
    const key = this.keys.get(keyId);
    if (!key) throw new SecretBoxError("unknown_key", `sealed secret uses key ${keyId}, which is not configured`);
    const bytes = Buffer.from(payload, "base64url");
    // Only the canonical encoding is accepted, so one value has exactly one text form.
    if (bytes.length < NONCE_BYTES + TAG_BYTES || bytes.toString("base64url") !== payload) {
      throw new SecretBoxError("malformed", "sealed secret is malformed");
    }
    const decipher = createDecipheriv("aes-256-gcm", key, bytes.subarray(0, NONCE_BYTES), { authTagLength: TAG_BYTES });
    decipher.setAAD(associatedData(keyId, aad));
    decipher.setAuthTag(bytes.subarray(bytes.length - TAG_BYTES));
    try {
      const plain = Buffer.concat([decipher.update(bytes.subarray(NONCE_BYTES, bytes.length - TAG_BYTES)), decipher.final()]);
      return plain.toString("utf8");
    } catch {
      throw new SecretBoxError(
        "authentication_failed",
        `sealed secret does not authenticate with key ${keyId}: it was altered or belongs to another record`,
      );
    }
  }

  /** How every value sealed by this box starts (current format and key). */
  get currentPrefix(): string {
    return `${SEALED_PREFIX}${VERSION}:${this.currentKeyId}:`;
  }

  /** Whether `text` is sealed in the current format with the current key (nothing to re-seal). */
  sealedWithCurrentKey(text: string): boolean {
    return text.startsWith(this.currentPrefix);
  }
}

// The version and key id are authenticated too: a value cannot be relabelled to another key or format.
function associatedData(keyId: string, aad: string): Buffer {
  return Buffer.from(`${SEALED_PREFIX}${VERSION}:${keyId}\0${aad}`, "utf8");
}
