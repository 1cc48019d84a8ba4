/**
 * `meta.k8s.io/v1 Table`, what `kubectl get` asks for: the CRD's printer
 * columns (their simple JSONPath forms: `.a.b` and `.list[?(@.k=='v')].f`)
 * plus Name and Age, the way the apiserver builds it.
 */
import type { ResourceType } from "./resources.ts";
import type { KObject } from "./store.ts";

/** Evaluates the JSONPath subset printer columns use; undefined when absent. */
export function jsonPath(object: unknown, path: string): unknown {
  let current: unknown[] = [object];
  const steps = path.replace(/^\./, "").match(/[^.[\]]+|\[\?\(@\.[^)]*\)\]/g) ?? [];
  for (const step of steps) {
    const filter = /^\[\?\(@\.([\w.-]+)\s*==\s*'([^']*)'\)\]$/.exec(step);
    current = current.flatMap((value) => {
      if (value === null || typeof value !== "object") return [];
      if (filter)
        return Array.isArray(value) ? value.filter((item) => (item as Record<string, unknown>)?.[filter[1] as string] === filter[2]) : [];
      const next = (value as Record<string, unknown>)[step];
      return next === undefined ? [] : [next];
    });
  }
  return current[0];
}

function age(created: string, now: number): string {
  const seconds = Math.max(0, Math.floor((now - Date.parse(created)) / 1000));
  if (seconds < 120) return `${seconds}s`;
  if (seconds < 7200) return `${Math.floor(seconds / 60)}m`;
  return `${Math.floor(seconds / 3600)}h`;
}

export function tableOf(type: ResourceType, items: KObject[], resourceVersion: string, now = Date.now()) {
  const columns = type.printerColumns.filter((c) => c.name !== "Age");
  return {
    kind: "Table",
    apiVersion: "meta.k8s.io/v1",
    metadata: { resourceVersion },
    columnDefinitions: [
      { name: "Name", type: "string", format: "name", description: "Name", priority: 0 },
      ...columns.map((c) => ({ name: c.name, type: c.type, format: "", description: c.jsonPath, priority: 0 })),
      { name: "Age", type: "string", format: "", description: "Age", priority: 0 },
    ],
    rows: items.map((item) => ({
      cells: [item.metadata.name, ...columns.map((c) => jsonPath(item, c.jsonPath) ?? "<none>"), age(item.metadata.creationTimestamp, now)],
      object: { kind: "PartialObjectMetadata", apiVersion: "meta.k8s.io/v1", metadata: item.metadata },
    })),
  };
}
