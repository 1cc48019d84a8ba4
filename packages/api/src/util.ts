import { toIso } from "@openma/storage";
import type { Context } from "hono";
import type { AppEnv } from "./context.ts";

export function nowIso(c: Context<AppEnv>): string {
  return toIso(c.get("deps").clock.now());
}

export function newIdFor(c: Context<AppEnv>, prefix: string): string {
  return c.get("deps").ids(prefix);
}

/** Parses a JSON column written by this server. */
export function fromJson<T>(text: string): T {
  return JSON.parse(text) as T;
}

/** Path parameters are user input too: bound their length before they reach SQL. */
export function pathId(c: Context<AppEnv>, name: string): string {
  const value = c.req.param(name) ?? "";
  return value.length > 256 ? value.slice(0, 256) : value;
}
