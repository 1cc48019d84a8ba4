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
  // No id contains NUL, and Postgres text cannot hold it (a query would fail with a 500):
  // map it to U+FFFD, which no id contains either, so the route answers its usual 404.
  const value = (c.req.param(name) ?? "").replaceAll("\u0000", "\uFFFD");
  return value.length > 256 ? value.slice(0, 256) : value;
}
