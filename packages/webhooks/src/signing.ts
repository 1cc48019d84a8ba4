/**
 * Standard Webhooks signatures, the scheme the official SDK's
 * `beta.webhooks.unwrap()` verifies: the secret is `whsec_` + base64 of the
 * key bytes; `webhook-signature` is `v1,` + base64(HMAC-SHA256(key,
 * "<webhook-id>.<webhook-timestamp>.<body>")), the timestamp in Unix seconds.
 */
import { createHmac, randomBytes } from "node:crypto";

const PREFIX = "whsec_";

/** A new signing secret: 32 random key bytes. */
export function newSigningSecret(): string {
  return `${PREFIX}${randomBytes(32).toString("base64")}`;
}

function keyOf(secret: string): Buffer {
  if (!secret.startsWith(PREFIX)) throw new Error("signing secret must start with whsec_");
  return Buffer.from(secret.slice(PREFIX.length), "base64");
}

export interface SignedHeaders {
  "webhook-id": string;
  "webhook-timestamp": string;
  "webhook-signature": string;
}

/** The three headers of one delivery attempt of `body` (sent byte for byte). */
export function signDelivery(secret: string, messageId: string, atMs: number, body: string): SignedHeaders {
  const timestamp = String(Math.floor(atMs / 1000));
  const mac = createHmac("sha256", keyOf(secret)).update(`${messageId}.${timestamp}.${body}`, "utf8").digest("base64");
  return { "webhook-id": messageId, "webhook-timestamp": timestamp, "webhook-signature": `v1,${mac}` };
}
