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
  return parseWith(schema, value, "body");
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
