/**
 * Ownership marks a remote driver writes on every runtime it creates (E2B
 * metadata, Daytona labels, Sprites labels), and reads back to list what it
 * owns (`SandboxInventoryPort.listOwned`) and to refuse touching anything it
 * did not create. One vocabulary for every vendor, so an operator filtering
 * a provider's console sees the same keys everywhere.
 *
 * The marks carry the scope (environment and session ids), the owner id and
 * the fence generation: never a token or credential.
 */
import { createHash } from "node:crypto";
import { type FenceIdentity, isRuntimeIdentifier, type RuntimeResourceScope, runtimeScopeKey } from "@openma/contract";

export const OWNERSHIP_KEYS = {
  managed: "openma.managed",
  driver: "openma.driver",
  environment: "openma.environment",
  session: "openma.session",
  owner: "openma.owner",
  generation: "openma.generation",
  acquireKey: "openma.acquire-key",
} as const;

const hash = (text: string) => createHash("sha256").update(text).digest("hex");

/** The marks of one acquire; `extra` (operator labels, e.g. a runtime host's identity) never overrides ours. */
export function ownershipLabels(
  driver: string,
  fence: Pick<FenceIdentity, "scope" | "ownerId" | "generation">,
  idempotencyKey: string,
  extra: Readonly<Record<string, string>> = {},
): Record<string, string> {
  return {
    ...extra,
    [OWNERSHIP_KEYS.managed]: "true",
    [OWNERSHIP_KEYS.driver]: driver,
    [OWNERSHIP_KEYS.environment]: fence.scope.environmentId,
    [OWNERSHIP_KEYS.session]: fence.scope.sessionId,
    [OWNERSHIP_KEYS.owner]: fence.ownerId,
    [OWNERSHIP_KEYS.generation]: String(fence.generation),
    [OWNERSHIP_KEYS.acquireKey]: hash(idempotencyKey).slice(0, 32),
  };
}

export interface Ownership {
  scope: RuntimeResourceScope;
  ownerId: string;
  generation: number;
}

/** The ownership read back from a runtime's marks, or null when this driver did not create it. */
export function ownershipOf(labels: Readonly<Record<string, string>> | undefined, driver: string): Ownership | null {
  if (labels === undefined) return null;
  if (labels[OWNERSHIP_KEYS.managed] !== "true" || labels[OWNERSHIP_KEYS.driver] !== driver) return null;
  const environmentId = labels[OWNERSHIP_KEYS.environment];
  const sessionId = labels[OWNERSHIP_KEYS.session];
  const ownerId = labels[OWNERSHIP_KEYS.owner];
  const generation = Number(labels[OWNERSHIP_KEYS.generation]);
  if (!isRuntimeIdentifier(environmentId) || !isRuntimeIdentifier(sessionId) || !isRuntimeIdentifier(ownerId)) return null;
  if (!Number.isSafeInteger(generation) || generation < 1) return null;
  return { scope: { environmentId, sessionId }, ownerId, generation };
}

/** Whether `labels` carry every mark in `wanted` (an acquire adopting a runtime checks its own marks). */
export function carriesLabels(labels: Readonly<Record<string, string>> | undefined, wanted: Readonly<Record<string, string>>): boolean {
  return labels !== undefined && Object.entries(wanted).every(([key, value]) => labels[key] === value);
}

/**
 * `<prefix>-<scope hash>-g<generation>-<acquire-key hash>`: lower-case,
 * DNS-label safe, at most 63 characters, and the same for the same acquire,
 * so a retried acquire finds the runtime instead of starting a second one.
 */
export function runtimeNameFor(prefix: string, scope: RuntimeResourceScope, generation: number, idempotencyKey: string): string {
  if (!/^[a-z][a-z0-9-]{0,15}$/.test(prefix)) throw new Error("runtime name prefix: 1-16 characters of [a-z0-9-], starting with a letter");
  return `${prefix}-${hash(runtimeScopeKey(scope)).slice(0, 16)}-g${generation}-${hash(idempotencyKey).slice(0, 10)}`;
}

/** Sprites-style labels (a list of strings) to and from the key/value form above. */
export function labelList(labels: Readonly<Record<string, string>>): string[] {
  return Object.entries(labels).map(([key, value]) => `${key}=${value}`);
}

export function labelMap(list: readonly string[] | undefined): Record<string, string> {
  const out: Record<string, string> = {};
  for (const item of list ?? []) {
    const eq = item.indexOf("=");
    if (eq > 0) out[item.slice(0, eq)] = item.slice(eq + 1);
  }
  return out;
}
