/**
 * What the bridge does to what it is sent, written once for the stand-in:
 * argv joined into one shell command with the bridge's own quoting (ANSI-C
 * `$'...'` for anything but safe characters, so a newline stays one
 * argument), paths resolved POSIX-style and confined to /workspace, ids in
 * RFC 4648 base32 (lower case). Behaviour read from the `@cloudflare/sandbox`
 * 0.12 bridge bundle; nothing of it is imported (it loads only in workerd).
 */
import { randomBytes } from "node:crypto";

const SAFE = /^[A-Za-z0-9@%+=:,./-]+$/;
export const SANDBOX_ID = /^[a-z2-7]{1,128}$/;
export const SESSION_ID = /^[a-zA-Z0-9._-]{1,128}$/;
export const WORKSPACE = "/workspace";

export function shellQuote(arg: string): string {
  if (SAFE.test(arg)) return arg;
  const escaped = arg.replace(/\\/g, "\\\\").replace(/'/g, "\\'").replace(/\n/g, "\\n").replace(/\r/g, "\\r").replace(/\t/g, "\\t");
  return `$'${escaped}'`;
}

/** The absolute path `userPath` names (relative ones under /workspace), or null when it leaves /workspace. */
export function resolveWorkspacePath(userPath: string): string | null {
  const absolute = userPath.startsWith("/") ? userPath : `${WORKSPACE}/${userPath}`;
  const parts: string[] = [];
  for (const segment of absolute.split("/")) {
    if (segment === "" || segment === ".") continue;
    if (segment === "..") parts.pop();
    else parts.push(segment);
  }
  const resolved = `/${parts.join("/")}`;
  return resolved === WORKSPACE || resolved.startsWith(`${WORKSPACE}/`) ? resolved : null;
}

/** A new sandbox id as `POST /v1/sandbox` makes one: 16 random bytes in lower-case base32. */
export function newSandboxId(): string {
  const alphabet = "abcdefghijklmnopqrstuvwxyz234567";
  let bits = 0;
  let value = 0;
  let out = "";
  for (const byte of randomBytes(16)) {
    value = (value << 8) | byte;
    bits += 8;
    while (bits >= 5) {
      out += alphabet[(value >>> (bits - 5)) & 31];
      bits -= 5;
    }
  }
  if (bits > 0) out += alphabet[(value << (5 - bits)) & 31];
  return out;
}

/** One SSE event as the bridge writes it (each data line prefixed). */
export function sseEvent(event: string, data: string): string {
  return `event: ${event}\n${data
    .split("\n")
    .map((line) => `data: ${line}`)
    .join("\n")}\n\n`;
}
