/**
 * Time-ordered identifiers: `<prefix>_<10 chars of ms time><16 random chars>`
 * in a lowercase Crockford alphabet whose ASCII order matches numeric order,
 * so ids sort by creation time and serve as keyset cursors on both backends.
 */
import { createHash, randomBytes } from "node:crypto";

const ALPHABET = "0123456789abcdefghjkmnpqrstvwxyz";

function encodeTime(ms: number): string {
  let out = "";
  let t = ms;
  for (let i = 0; i < 10; i++) {
    out = ALPHABET[t % 32] + out;
    t = Math.floor(t / 32);
  }
  return out;
}

function randomChars(n: number): string {
  const bytes = randomBytes(n);
  let out = "";
  for (const b of bytes) out += ALPHABET[b % 32];
  return out;
}

export type IdFactory = (prefix: string) => string;

/** Monotonic within one process: a second id in the same millisecond sorts after the first. */
export function createIdFactory(now: () => number = Date.now): IdFactory {
  let lastTime = -1;
  let counter = 0;
  return (prefix) => {
    const t = now();
    if (t === lastTime) counter++;
    else {
      lastTime = t;
      counter = 0;
    }
    const seq = counter.toString(32).padStart(4, "0");
    return `${prefix}_${encodeTime(t)}${seq}${randomChars(12)}`;
  };
}

export const newId: IdFactory = createIdFactory();

/** A bearer secret: prefix plus 256 bits of randomness in base64url. */
export function newSecret(prefix: string): string {
  return `${prefix}${randomBytes(32).toString("base64url")}`;
}

/** Secrets are stored only as SHA-256 digests; lookups hash the presented value. */
export function hashSecret(secret: string): string {
  return createHash("sha256").update(secret, "utf8").digest("hex");
}
