/**
 * The unit a resource fence protects. It is keyed by Session, not by Work
 * item: every Environment Work reclaim of one Session must see the same
 * workspace and output pointers, so the generation counter has to outlive any
 * single claim (a per-Work scope would start each reclaim from an empty
 * workspace).
 */
import { canonicalJson } from "./json.ts";

export interface RuntimeResourceScope {
  environmentId: string;
  sessionId: string;
}

/** Upper bound for ids, owner ids, keys and provider names kept in SQL text columns. */
export const RUNTIME_IDENTIFIER_MAX_LENGTH = 256;

/** Non-empty, bounded, printable: safe as a SQL key and in a log line. */
export function isRuntimeIdentifier(value: unknown): value is string {
  return (
    typeof value === "string" &&
    value.length > 0 &&
    value.length <= RUNTIME_IDENTIFIER_MAX_LENGTH &&
    // biome-ignore lint/suspicious/noControlCharactersInRegex: rejecting control characters is the point
    !/[\u0000-\u001f\u007f]/.test(value)
  );
}

export function isRuntimeResourceScope(value: unknown): value is RuntimeResourceScope {
  if (typeof value !== "object" || value === null) return false;
  const scope = value as Partial<RuntimeResourceScope>;
  return isRuntimeIdentifier(scope.environmentId) && isRuntimeIdentifier(scope.sessionId);
}

/**
 * Stable text key of a scope. A JSON array, so ids containing separators can
 * never make two scopes collide.
 */
export function runtimeScopeKey(scope: RuntimeResourceScope): string {
  return canonicalJson([scope.environmentId, scope.sessionId]);
}
