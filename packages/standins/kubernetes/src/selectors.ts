/**
 * Label selectors (equality- and set-based, as `labelSelector=` carries
 * them) and the two field selectors every resource supports
 * (`metadata.name`, `metadata.namespace`).
 */
import { badRequest } from "./status.ts";

type Requirement =
  | { op: "=" | "!="; key: string; value: string }
  | { op: "in" | "notin"; key: string; values: string[] }
  | { op: "exists" | "!exists"; key: string };

export type Matcher = (fields: { labels: Record<string, string>; name: string; namespace: string }) => boolean;

/** Splits on commas outside parentheses. */
function terms(text: string): string[] {
  const out: string[] = [];
  let depth = 0;
  let current = "";
  for (const ch of text) {
    if (ch === "(") depth++;
    if (ch === ")") depth--;
    if (ch === "," && depth === 0) {
      out.push(current);
      current = "";
    } else current += ch;
  }
  if (current.trim() !== "" || out.length > 0) out.push(current);
  return out.map((t) => t.trim()).filter((t) => t !== "");
}

function requirement(term: string): Requirement {
  const set = /^(\S+)\s+(in|notin)\s*\(([^)]*)\)$/.exec(term);
  if (set) {
    const values = (set[3] as string)
      .split(",")
      .map((v) => v.trim())
      .filter((v) => v !== "");
    return { op: set[2] as "in" | "notin", key: set[1] as string, values };
  }
  const eq = /^([^=!\s]+)\s*(==|=|!=)\s*(\S*)$/.exec(term);
  if (eq) return { op: eq[2] === "!=" ? "!=" : "=", key: eq[1] as string, value: eq[3] as string };
  if (/^![^=!\s(),]+$/.test(term)) return { op: "!exists", key: term.slice(1) };
  if (/^[^=!\s(),]+$/.test(term)) return { op: "exists", key: term };
  throw badRequest(`unable to parse requirement: ${JSON.stringify(term)}`);
}

function matches(r: Requirement, labels: Record<string, string>): boolean {
  const has = Object.hasOwn(labels, r.key);
  const value = labels[r.key];
  switch (r.op) {
    case "=":
      return has && value === r.value;
    case "!=":
      return !has || value !== r.value;
    case "in":
      return has && r.values.includes(value as string);
    case "notin":
      return !has || !r.values.includes(value as string);
    case "exists":
      return has;
    case "!exists":
      return !has;
  }
}

export function selector(labelSelector: string | undefined, fieldSelector: string | undefined): Matcher {
  const labelReqs = terms(labelSelector ?? "").map(requirement);
  const fieldReqs = terms(fieldSelector ?? "").map((term) => {
    const m = /^(metadata\.name|metadata\.namespace)\s*(==|=|!=)\s*(.*)$/.exec(term);
    if (!m) throw badRequest(`field label not supported: ${term.split(/[!=]/)[0]}`);
    return { field: m[1] === "metadata.name" ? "name" : "namespace", negate: m[2] === "!=", value: m[3] as string } as const;
  });
  return ({ labels, name, namespace }) =>
    labelReqs.every((r) => matches(r, labels)) &&
    fieldReqs.every((r) => ((r.field === "name" ? name : namespace) === r.value) !== r.negate);
}
