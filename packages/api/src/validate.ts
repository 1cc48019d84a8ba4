/**
 * Edge validation: every body and query is parsed with zod, and a failure
 * becomes a 400 whose message names the offending field.
 */
import type { Context } from "hono";
import { z } from "zod";
import { badRequest } from "./errors.ts";

export function describeIssues(error: z.ZodError, root: string): string {
  return error.issues
    .slice(0, 5)
    .map((issue) => {
      const path = issue.path.length ? issue.path.map((p) => (typeof p === "number" ? `[${p}]` : `.${String(p)}`)).join("") : "";
      const field = `${root}${path}`.replace(/^\./, "");
      return `${field || root}: ${issue.message}`;
    })
    .join("; ");
}

export function parseWith<T extends z.ZodType>(schema: T, value: unknown, root: string): z.output<T> {
  const result = schema.safeParse(value);
  if (!result.success) throw badRequest(describeIssues(result.error, root));
  return result.data;
}

/** Parses a JSON body. A missing body is `{}` only when `allowEmpty`. */
export async function parseJsonBody<T extends z.ZodType>(c: Context, schema: T, opts: { allowEmpty?: boolean } = {}): Promise<z.output<T>> {
  const text = await c.req.text();
  let value: unknown;
  if (text.trim() === "") {
    if (!opts.allowEmpty) throw badRequest("request body is required");
    value = {};
  } else {
    try {
      value = JSON.parse(text);
    } catch {
      throw badRequest("request body is not valid JSON");
    }
  }
  const problem = bodyShapeProblem(value);
  if (problem) throw badRequest(problem);
  return parseWith(schema, value, "body");
}

const MAX_BODY_DEPTH = 64;

/**
 * Refuses, once at the edge, what no field of this API needs and what would
 * hurt later: NUL characters (Postgres text cannot hold them) and absurd
 * nesting (recursive validators would exhaust the stack). Iterative, so the
 * check itself cannot overflow.
 */
function bodyShapeProblem(root: unknown): string | null {
  const stack: Array<{ value: unknown; path: string; depth: number }> = [{ value: root, path: "body", depth: 0 }];
  while (stack.length > 0) {
    const { value, path, depth } = stack.pop()!;
    if (typeof value === "string") {
      if (value.includes("\u0000")) return `${path}: must not contain NUL characters`;
      continue;
    }
    if (value === null || typeof value !== "object") continue;
    if (depth >= MAX_BODY_DEPTH) return `${path}: nested more than ${MAX_BODY_DEPTH} levels deep`;
    if (Array.isArray(value)) {
      for (const [i, v] of value.entries()) stack.push({ value: v, path: `${path}[${i}]`, depth: depth + 1 });
      continue;
    }
    for (const [k, v] of Object.entries(value)) {
      if (k.includes("\u0000")) return `${path}: keys must not contain NUL characters`;
      stack.push({ value: v, path: `${path}.${k}`, depth: depth + 1 });
    }
  }
  return null;
}

/**
 * Query parameters as the SDK encodes them (qs brackets mode): `key[]=a&key[]=b`
 * becomes `{key: ["a","b"]}`, `created_at[gte]=…` stays the flat key
 * `"created_at[gte]"`, and empty values count as absent.
 */
export function queryObject(c: Context): Record<string, string | string[]> {
  const out: Record<string, string | string[]> = {};
  const url = new URL(c.req.url);
  for (const [rawKey, value] of url.searchParams) {
    if (value === "") continue;
    // Postgres text cannot hold NUL: refuse it here instead of failing a query with a 500.
    if (value.includes("\u0000")) throw badRequest(`query.${rawKey}: must not contain NUL characters`);
    if (rawKey.endsWith("[]")) {
      const key = rawKey.slice(0, -2);
      const prev = out[key];
      out[key] = Array.isArray(prev) ? [...prev, value] : [value];
    } else {
      out[rawKey] = value;
    }
  }
  return out;
}

export function parseQuery<T extends z.ZodType>(c: Context, schema: T): z.output<T> {
  return parseWith(schema, queryObject(c), "query");
}

/** Query booleans arrive as "true"/"false". */
export const queryBool = z.enum(["true", "false"]).transform((v) => v === "true");

/** Query integers arrive as decimal strings. */
export const queryInt = (min: number, max: number) =>
  z
    .string()
    .regex(/^-?\d+$/, "expected an integer")
    .transform(Number)
    .pipe(z.number().int().min(min).max(max));

/** An array query param (`types[]`) may also arrive once without brackets. */
export const queryArray = <T extends z.ZodType>(item: T) => z.preprocess((v) => (typeof v === "string" ? [v] : v), z.array(item));

export const metadataSchema = z
  .record(
    z.string().max(64, "metadata keys must be at most 64 characters"),
    z.string().max(512, "metadata values must be at most 512 characters"),
  )
  .refine((m) => Object.keys(m).length <= 16, "at most 16 metadata pairs");

/** A metadata patch: `null` or `""` deletes a key. */
export const metadataPatchSchema = z.record(z.string().max(64), z.string().max(512).nullable());

export function applyMetadataPatch(
  current: Record<string, string>,
  patch: Record<string, string | null> | null | undefined,
): Record<string, string> {
  if (patch === undefined) return current;
  if (patch === null) return {};
  const next = { ...current };
  for (const [k, v] of Object.entries(patch)) {
    if (v === null || v === "") delete next[k];
    else next[k] = v;
  }
  if (Object.keys(next).length > 16) throw badRequest("metadata: at most 16 metadata pairs", { error_code: "invalid_metadata" });
  return next;
}
