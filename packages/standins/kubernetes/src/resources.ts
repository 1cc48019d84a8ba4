/**
 * The resource types the stand-in serves: core/v1 pods, and the four
 * agent-sandbox CRDs read unchanged from the upstream YAML in `crds/`
 * (names, scope, printer columns, and the openAPIV3Schema every write is
 * validated against). Only each CRD's storage version is served: the
 * upstream serves v1alpha1 too but converts through a webhook the stand-in
 * does not emulate, and a client that asked for it would get data in the
 * wrong shape.
 */
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { Ajv, type ValidateFunction } from "ajv";
import { parse } from "yaml";

export interface PrinterColumn {
  name: string;
  type: string;
  jsonPath: string;
}

export interface ResourceType {
  group: string;
  version: string;
  plural: string;
  singular: string;
  kind: string;
  shortNames: string[];
  /** Has a `/status` subresource: spec writes ignore status and status writes ignore everything else. */
  hasStatus: boolean;
  printerColumns: PrinterColumn[];
  /** Validates (and defaults and prunes, in place) a whole object; null for built-in kinds. */
  validate: ((object: unknown) => string[]) | null;
  /** `apiVersion` as objects carry it. */
  apiVersion: string;
}

const CRD_FILES = [
  "agents.x-k8s.io_sandboxes.yaml",
  "extensions.agents.x-k8s.io_sandboxclaims.yaml",
  "extensions.agents.x-k8s.io_sandboxtemplates.yaml",
  "extensions.agents.x-k8s.io_sandboxwarmpools.yaml",
];

export const CRD_DIR = join(dirname(fileURLToPath(import.meta.url)), "..", "crds");

interface CrdVersion {
  name: string;
  storage: boolean;
  served: boolean;
  schema: { openAPIV3Schema: Record<string, unknown> };
  subresources?: { status?: unknown };
  additionalPrinterColumns?: PrinterColumn[];
}

interface Crd {
  spec: {
    group: string;
    names: { kind: string; plural: string; singular: string; shortNames?: string[] };
    scope: string;
    versions: CrdVersion[];
  };
}

/**
 * A structural schema prunes unknown fields (it does not reject them), so
 * every object schema that lists properties and neither declares a map
 * (`additionalProperties`) nor preserves unknown fields gets
 * `additionalProperties: false`, which Ajv's `removeAdditional` turns into
 * pruning. `metadata` is the apiserver's own and never pruned.
 */
function structural(schema: unknown, path: string): unknown {
  if (Array.isArray(schema)) return schema.map((s) => structural(s, path));
  if (schema === null || typeof schema !== "object") return schema;
  const out: Record<string, unknown> = {};
  for (const [key, value] of Object.entries(schema)) {
    if (key === "properties" && value !== null && typeof value === "object") {
      out[key] = Object.fromEntries(Object.entries(value).map(([name, sub]) => [name, structural(sub, `${path}.${name}`)]));
    } else if (key === "items" || key === "additionalProperties" || key === "anyOf" || key === "allOf" || key === "oneOf") {
      out[key] = structural(value, path);
    } else out[key] = value;
  }
  const obj = schema as Record<string, unknown>;
  if (obj.properties !== undefined && obj.additionalProperties === undefined && obj["x-kubernetes-preserve-unknown-fields"] !== true) {
    out.additionalProperties = false;
  }
  return out;
}

function newAjv(): Ajv {
  // The Kubernetes vocabulary (x-kubernetes-*) is annotation for Ajv; CEL rules (x-kubernetes-validations) are not evaluated.
  const ajv = new Ajv({ strict: false, allErrors: true, useDefaults: true, removeAdditional: true, coerceTypes: false });
  ajv.addFormat("int32", { type: "number", validate: (n: number) => Number.isInteger(n) && n >= -(2 ** 31) && n < 2 ** 31 });
  ajv.addFormat("int64", { type: "number", validate: (n: number) => Number.isSafeInteger(n) });
  ajv.addFormat("date-time", /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$/i);
  return ajv;
}

function errorsOf(validate: ValidateFunction): string[] {
  return (validate.errors ?? []).map((e) => {
    const field = e.instancePath.replaceAll("/", ".").replace(/^\./, "") || "<root>";
    return `${field}: ${e.message ?? "invalid"}${e.params && "allowedValues" in e.params ? ` (${(e.params.allowedValues as unknown[]).join(", ")})` : ""}`;
  });
}

function crdTypes(dir: string): ResourceType[] {
  const ajv = newAjv();
  return CRD_FILES.map((file) => {
    const crd = parse(readFileSync(join(dir, file), "utf8")) as Crd;
    const version = crd.spec.versions.find((v) => v.storage && v.served);
    if (!version) throw new Error(`${file}: no served storage version`);
    let compiled: ValidateFunction | null = null;
    const { group, names } = crd.spec;
    return {
      group,
      version: version.name,
      plural: names.plural,
      singular: names.singular,
      kind: names.kind,
      shortNames: names.shortNames ?? [],
      hasStatus: version.subresources?.status !== undefined,
      printerColumns: version.additionalPrinterColumns ?? [],
      apiVersion: `${group}/${version.name}`,
      validate(object: unknown) {
        // Compiled on first use: the Sandbox and SandboxTemplate schemas embed the whole PodSpec.
        compiled ??= ajv.compile(structural(version.schema.openAPIV3Schema, "") as Record<string, unknown>);
        return compiled(object) ? [] : errorsOf(compiled);
      },
    };
  });
}

export const POD: ResourceType = {
  group: "",
  version: "v1",
  plural: "pods",
  singular: "pod",
  kind: "Pod",
  shortNames: ["po"],
  hasStatus: true,
  printerColumns: [
    { name: "Status", type: "string", jsonPath: ".status.phase" },
    { name: "IP", type: "string", jsonPath: ".status.podIP" },
  ],
  validate: null,
  apiVersion: "v1",
};

export class ResourceTypes {
  readonly all: ResourceType[];

  constructor(crdDir = CRD_DIR) {
    this.all = [POD, ...crdTypes(crdDir)];
  }

  find(group: string, version: string, plural: string): ResourceType | undefined {
    return this.all.find((t) => t.group === group && t.version === version && t.plural === plural);
  }

  byKind(kind: string): ResourceType {
    const type = this.all.find((t) => t.kind === kind);
    if (!type) throw new Error(`no resource type of kind ${kind}`);
    return type;
  }

  groups(): Map<string, ResourceType[]> {
    const groups = new Map<string, ResourceType[]>();
    for (const t of this.all) if (t.group !== "") groups.set(t.group, [...(groups.get(t.group) ?? []), t]);
    return groups;
  }
}
