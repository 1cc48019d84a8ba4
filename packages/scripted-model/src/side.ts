/**
 * Side requests: the calls agents make besides their conversation turns
 * (session titles, routing classifiers, prompt suggestions, quota probes).
 * They arrive at unpredictable points, so scripting them as turns would make
 * every script depend on one agent's habits. Instead a side rule recognizes
 * them and answers them without consuming a turn or a queued fault, and they
 * are recorded apart from the turn requests.
 *
 * The script's own rules come first, then (unless `defaults: false`) these
 * built-in ones, each taken from what real agents send:
 *
 * - `quota-probe`: an output cap of 1 token (Claude Code's quota check).
 * - `structured-output`: a request that demands JSON by schema or JSON mode
 *   (Claude Code's title call, Gemini CLI's routing classifier and
 *   next-speaker check) gets JSON built from the schema (see jsonFromSchema).
 * - `prompt-suggestion`: Claude Code's "[SUGGESTION MODE: …]" fork, answered
 *   with no suggestion.
 * - `title`: a tool-less request whose system prompt is about a title
 *   (OpenCode's title agent) gets "Scripted title".
 */
import { mismatch } from "./match.ts";
import type { ResponseSpec, Script, SideRule } from "./script.ts";
import { parseScript } from "./script.ts";
import type { RequestView } from "./view.ts";

export const DEFAULT_SIDE_RULES: readonly SideRule[] = parseScript({
  turns: [],
  side_requests: {
    rules: [
      { label: "quota-probe", match: { max_output_tokens_at_most: 1 }, response: "ok" },
      { label: "structured-output", match: { json_output: true }, json: {} },
      { label: "prompt-suggestion", match: { last_user_text_contains: "[SUGGESTION MODE" }, response: { content: [] } },
      { label: "title", match: { has_tools: false, system_matches: "\\btitle\\b" }, response: "Scripted title" },
    ],
  },
}).side_requests!.rules;

export function sideRulesOf(script: Script): SideRule[] {
  const own = script.side_requests?.rules ?? [];
  return script.side_requests?.defaults === false ? own : [...own, ...DEFAULT_SIDE_RULES];
}

export interface SideAnswer {
  label: string;
  response: ResponseSpec;
}

/** The first rule that takes the request, with the response it gives; null for a conversation turn. */
export function sideAnswer(rules: readonly SideRule[], view: RequestView): SideAnswer | null {
  for (const rule of rules) {
    if (mismatch(rule.match, view) !== null) continue;
    const response = rule.response ?? {
      content: [{ type: "text", text: JSON.stringify(jsonFromSchema(view.json_schema, rule.json ?? {})) }],
    };
    return { label: rule.label, response };
  }
  return null;
}

type Schema = Record<string, unknown>;

const isSchema = (v: unknown): v is Schema => typeof v === "object" && v !== null && !Array.isArray(v);

/** JSON Schema type names, and Gemini's upper-case `Type` enum, as one lower-case name. */
function typeOf(s: Schema): string | undefined {
  const t = Array.isArray(s.type) ? s.type.find((x) => String(x).toLowerCase() !== "null") : s.type;
  if (typeof t === "string") return t.toLowerCase();
  return isSchema(s.properties) ? "object" : undefined;
}

/**
 * The schema's minimum when it has one, else 1 (or its maximum when that is
 * below 1): Gemini CLI's classifier rejects a score below 1, and a confidence
 * bounded to [0, 1] stays at 0 so no check reads as alarmed.
 */
function numberIn(s: Schema): number {
  if (typeof s.minimum === "number") return s.minimum;
  if (typeof s.maximum === "number" && s.maximum < 1) return s.maximum;
  return 1;
}

function valueFor(schema: unknown, name: string, depth: number): unknown {
  if (!isSchema(schema) || depth > 16) return `scripted ${name}`;
  if ("const" in schema) return schema.const;
  if (Array.isArray(schema.enum) && schema.enum.length > 0) return schema.enum[0];
  if ("default" in schema) return schema.default;
  const alternatives = schema.anyOf ?? schema.oneOf;
  if (Array.isArray(alternatives) && alternatives.length > 0) return valueFor(alternatives[0], name, depth + 1);
  switch (typeOf(schema)) {
    case "object":
      return objectFor(schema, {}, depth);
    case "array": {
      const n = typeof schema.minItems === "number" ? schema.minItems : 0;
      return Array.from({ length: n }, () => valueFor(schema.items, name, depth + 1));
    }
    case "integer":
    case "number":
      return numberIn(schema);
    case "boolean":
      return false;
    case "null":
      return null;
    default:
      return `scripted ${name}`;
  }
}

function objectFor(schema: Schema, overrides: Record<string, unknown>, depth: number): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  const properties = isSchema(schema.properties) ? schema.properties : {};
  for (const [key, prop] of Object.entries(properties)) out[key] = key in overrides ? overrides[key] : valueFor(prop, key, depth + 1);
  for (const [key, value] of Object.entries(overrides)) if (!(key in out)) out[key] = value;
  return out;
}

/**
 * A value that satisfies a JSON schema (or Gemini's schema dialect): every
 * property present, the first enum value, numbers at their minimum (1 when unbounded),
 * `"scripted <name>"` for strings, arrays at their minimum length. Top-level
 * `overrides` replace properties by name. Without a schema (JSON mode), just
 * the overrides.
 */
export function jsonFromSchema(schema: unknown, overrides: Record<string, unknown>): unknown {
  if (!isSchema(schema)) return { ...overrides };
  if (typeOf(schema) === "object") return objectFor(schema, overrides, 0);
  return valueFor(schema, "value", 0);
}
