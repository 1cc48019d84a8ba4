/** `metav1.Status`: the one error body every Kubernetes client parses. */
export type StatusReason =
  | "NotFound"
  | "AlreadyExists"
  | "Conflict"
  | "Invalid"
  | "BadRequest"
  | "Expired"
  | "Gone"
  | "MethodNotAllowed"
  | "Unauthorized"
  | "UnsupportedMediaType"
  | "InternalError";

export interface Status {
  kind: "Status";
  apiVersion: "v1";
  metadata: Record<string, never>;
  status: "Failure" | "Success";
  message: string;
  reason?: StatusReason;
  details?: { name?: string; group?: string; kind?: string; causes?: { reason?: string; message: string; field?: string }[] };
  code: number;
}

export class StatusError extends Error {
  constructor(
    readonly code: number,
    readonly reason: StatusReason,
    message: string,
    readonly details?: Status["details"],
  ) {
    super(message);
  }

  toStatus(): Status {
    return {
      kind: "Status",
      apiVersion: "v1",
      metadata: {},
      status: "Failure",
      message: this.message,
      reason: this.reason,
      ...(this.details ? { details: this.details } : {}),
      code: this.code,
    };
  }
}

/** What the resource is called in messages: `sandboxclaims.extensions.agents.x-k8s.io` or `pods`. */
export function resourceName(group: string, plural: string): string {
  return group === "" ? plural : `${plural}.${group}`;
}

export const notFound = (group: string, plural: string, name: string) =>
  new StatusError(404, "NotFound", `${resourceName(group, plural)} "${name}" not found`, { name, group, kind: plural });

export const alreadyExists = (group: string, plural: string, name: string) =>
  new StatusError(409, "AlreadyExists", `${resourceName(group, plural)} "${name}" already exists`, { name, group, kind: plural });

export const conflict = (group: string, plural: string, name: string) =>
  new StatusError(
    409,
    "Conflict",
    `Operation cannot be fulfilled on ${resourceName(group, plural)} "${name}": the object has been modified; please apply your changes to the latest version and try again`,
    { name, group, kind: plural },
  );

export const invalid = (group: string, kind: string, name: string, causes: { field?: string; message: string }[]) =>
  new StatusError(422, "Invalid", `${kind}.${group || "core"} "${name}" is invalid: ${causes.map((c) => c.message).join(", ")}`, {
    name,
    group,
    kind,
    causes: causes.map((c) => ({ reason: "FieldValueInvalid", ...c })),
  });

export const badRequest = (message: string) => new StatusError(400, "BadRequest", message);
