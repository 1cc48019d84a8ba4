/**
 * Ownership in the box name. BoxLite's REST create takes no labels (the
 * OpenAPI's `CreateBoxRequest` is `additionalProperties: false` and has no
 * `labels`; `Box.labels` is read-only), and the official client's box info
 * carries nothing free-form but the name: so the kit's ownership marks
 * travel in it, as far as 128 characters of `[A-Za-z0-9._-]` allow.
 *
 *   `<prefix>.<extra>.<scope>.g<generation>.<key>.<owner>`
 *
 * - `prefix`: the driver's name prefix (`openma`, `openma-rh`, ...): what a listing filters by.
 * - `extra`: 8 hex of the operator labels (a runtime host's identity, a serve deployment), so a
 *   listing under those labels finds exactly its own boxes.
 * - `scope`: 16 hex of the environment and session ids (too long to carry whole).
 * - `generation`: the fence generation, verbatim.
 * - `key`: 12 hex of the acquire key, so a retried acquire finds the box an earlier attempt made.
 * - `owner`: the owner id itself, base64url, so the serve reaper can look its owner record up.
 *
 * `.` never occurs inside a field (hex, digits and base64url have none), so
 * parsing is exact. Reading a name back gives the owner and generation
 * verbatim, and the scope as its digest (`sha256:<hex>`): enough for every
 * reaper (they judge by owner record or host label and kill by lease), not
 * for an operator reading session ids off the console.
 */
import { createHash } from "node:crypto";
import { OWNERSHIP_KEYS } from "@openma/driver-kit/remote";

export const MAX_BOX_NAME = 128;
const PREFIX = /^[a-z][a-z0-9-]{0,15}$/;

const digest = (text: string, length: number) => createHash("sha256").update(text).digest("hex").slice(0, length);

/** The marks the kit writes itself; everything else in a label set is the operator's. */
const KIT_KEYS = new Set<string>(Object.values(OWNERSHIP_KEYS));

/** A stable digest of the operator labels (sorted, so key order never matters). */
function extraDigest(labels: Readonly<Record<string, string>>): string {
  const extra = Object.entries(labels)
    .filter(([key]) => !KIT_KEYS.has(key))
    .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  return digest(JSON.stringify(extra), 8);
}

/** The operator labels of a set (what a listing adds back to the boxes it matched by digest). */
export function extraLabels(labels: Readonly<Record<string, string>>): Record<string, string> {
  return Object.fromEntries(Object.entries(labels).filter(([key]) => !KIT_KEYS.has(key)));
}

/** Marks that cannot make a box name: no retry changes that. */
export class BoxNameError extends Error {}

/** The box name of an acquire's labels; throws a BoxNameError when they cannot fit the API's 128 characters. */
export function boxNameFor(prefix: string, labels: Readonly<Record<string, string>>): string {
  if (!PREFIX.test(prefix)) throw new Error("box name prefix: 1-16 characters of [a-z0-9-], starting with a letter");
  const environment = labels[OWNERSHIP_KEYS.environment] ?? "";
  const session = labels[OWNERSHIP_KEYS.session] ?? "";
  const owner = labels[OWNERSHIP_KEYS.owner] ?? "";
  const generation = labels[OWNERSHIP_KEYS.generation] ?? "";
  const key = labels[OWNERSHIP_KEYS.acquireKey] ?? "";
  if (!/^[1-9][0-9]*$/.test(generation) || owner === "") throw new BoxNameError("box name: the labels lack an owner or a generation");
  const name = [
    prefix,
    extraDigest(labels),
    digest(JSON.stringify([environment, session]), 16),
    `g${generation}`,
    digest(key, 12),
    Buffer.from(owner).toString("base64url"),
  ].join(".");
  if (name.length > MAX_BOX_NAME)
    throw new BoxNameError(`the owner id is too long to travel in a BoxLite box name (${name.length} > ${MAX_BOX_NAME} characters)`);
  return name;
}

export interface ParsedName {
  extra: string;
  /** The kit's marks as far as the name carries them (the scope as digests). */
  labels: Record<string, string>;
}

/** The marks a box name of `prefix` carries, or null when it is not one of ours. */
export function parseBoxName(prefix: string, name: string | null | undefined, driver: string): ParsedName | null {
  if (!name?.startsWith(`${prefix}.`)) return null;
  const fields = name.slice(prefix.length + 1).split(".");
  if (fields.length !== 5) return null;
  const [extra, scope, generation, key, owner] = fields as [string, string, string, string, string];
  if (!/^[0-9a-f]{8}$/.test(extra) || !/^[0-9a-f]{16}$/.test(scope) || !/^[0-9a-f]{12}$/.test(key)) return null;
  if (!/^g[1-9][0-9]*$/.test(generation) || !/^[A-Za-z0-9_-]+$/.test(owner)) return null;
  const ownerId = Buffer.from(owner, "base64url").toString("utf8");
  if (ownerId === "") return null;
  return {
    extra,
    labels: {
      [OWNERSHIP_KEYS.managed]: "true",
      [OWNERSHIP_KEYS.driver]: driver,
      [OWNERSHIP_KEYS.environment]: `sha256:${scope}`,
      [OWNERSHIP_KEYS.session]: `sha256:${scope}`,
      [OWNERSHIP_KEYS.owner]: ownerId,
      [OWNERSHIP_KEYS.generation]: generation.slice(1),
      [OWNERSHIP_KEYS.acquireKey]: `sha256:${key}`,
    },
  };
}

/** Whether a parsed name was made for a label set carrying these operator labels. */
export function matchesExtra(parsed: ParsedName, labels: Readonly<Record<string, string>>): boolean {
  return parsed.extra === extraDigest(labels);
}
