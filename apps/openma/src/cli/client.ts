/**
 * What every client command shares: where the server is, the key, the output mode, and the official SDK client.
 * The key comes from the environment or a file named by a flag, never from argv (argv shows up in `ps`).
 */
import { readFileSync } from "node:fs";
import type { Readable, Writable } from "node:stream";
import Anthropic from "@anthropic-ai/sdk";

/** The process's streams and environment, injectable so tests run commands in-process. */
export interface CliIo {
  stdout: Writable & { isTTY?: boolean };
  stderr: Writable;
  stdin: Readable;
  env: Record<string, string | undefined>;
}

export const processIo = (): CliIo => ({ stdout: process.stdout, stderr: process.stderr, stdin: process.stdin, env: process.env });

export interface GlobalOptions {
  "base-url"?: string;
  "api-key-file"?: string;
  json?: boolean;
}

/** Flags every client command accepts (node:util parseArgs shape). */
export const GLOBAL_FLAGS = {
  "base-url": { type: "string" },
  "api-key-file": { type: "string" },
  json: { type: "boolean" },
} as const;

export class UsageError extends Error {}

export function connect(opts: GlobalOptions, env: CliIo["env"]): Anthropic {
  const baseURL = opts["base-url"] ?? env.OPENMA_BASE_URL ?? env.ANTHROPIC_BASE_URL ?? "http://127.0.0.1:8787";
  const apiKey = opts["api-key-file"] ? readFileSync(opts["api-key-file"], "utf8").trim() : (env.OPENMA_API_KEY ?? env.ANTHROPIC_API_KEY);
  if (!apiKey) throw new UsageError("no API key: set OPENMA_API_KEY (or ANTHROPIC_API_KEY), or pass --api-key-file <path>");
  return new Anthropic({ baseURL, apiKey, maxRetries: 2 });
}
