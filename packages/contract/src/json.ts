/**
 * JSON helpers shared by every port. Pointers, leases and digests are compared
 * as canonical JSON so that "byte-identical" means the same thing on every
 * host, whatever order an adapter happened to build its object keys in.
 */

export type JsonPrimitive = string | number | boolean | null;
export type JsonValue = JsonPrimitive | JsonValue[] | { [key: string]: JsonValue };

/** Flat, non-secret annotations an adapter may attach to leases and candidates. */
export type FlatMetadata = Record<string, string | number | boolean | null>;

/** Deep enough for any pointer or lease we produce; a deeper value is almost surely a cycle. */
const MAX_DEPTH = 32;

/**
 * Key-sorted JSON without whitespace. Unlike `JSON.stringify` it refuses
 * values that would serialize lossily (`NaN`, `Infinity`, functions, class
 * instances, cycles) instead of quietly turning them into `null` or `{}`,
 * because a digest over a lossy encoding would make two different pointers
 * look like an idempotent replay. Object keys whose value is `undefined` are
 * omitted, exactly as `JSON.stringify` does.
 */
export function canonicalJson(value: unknown): string {
  return encode(value, 0);
}

function encode(value: unknown, depth: number): string {
  if (depth > MAX_DEPTH) throw new TypeError("canonicalJson: value is nested too deeply (cycle?)");
  if (value === null || typeof value === "string" || typeof value === "boolean") return JSON.stringify(value);
  if (typeof value === "number") {
    if (!Number.isFinite(value)) throw new TypeError("canonicalJson: non-finite number");
    return JSON.stringify(value);
  }
  if (Array.isArray(value)) return `[${value.map((item) => encode(item, depth + 1)).join(",")}]`;
  if (isPlainObject(value)) {
    const parts: string[] = [];
    for (const key of Object.keys(value).sort()) {
      const item = value[key];
      if (item !== undefined) parts.push(`${JSON.stringify(key)}:${encode(item, depth + 1)}`);
    }
    return `{${parts.join(",")}}`;
  }
  throw new TypeError(`canonicalJson: unsupported value of type ${typeof value}`);
}

export function isPlainObject(value: unknown): value is Record<string, unknown> {
  if (typeof value !== "object" || value === null) return false;
  const proto = Object.getPrototypeOf(value);
  return proto === Object.prototype || proto === null;
}

/** True for `{key: string | finite number | boolean | null}` objects only. */
export function isFlatMetadata(value: unknown): value is FlatMetadata {
  if (!isPlainObject(value)) return false;
  return Object.values(value).every(
    (item) => item === null || typeof item === "string" || typeof item === "boolean" || (typeof item === "number" && Number.isFinite(item)),
  );
}
