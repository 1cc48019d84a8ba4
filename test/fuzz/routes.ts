/**
 * The fuzz test's route table, taken from the OpenAPI document the server
 * serves (`openApiDocument`, the same one as `/v1/openapi.json`), so every
 * documented route is fuzzed unless it is skipped below with a reason; the
 * document itself is checked against the router (packages/api/src/openapi.test.ts),
 * so a new route cannot escape the fuzz suite.
 */
import { openApiDocument } from "@openma/api/openapi";

export type Cred = "api" | "env" | "token";

export interface Route {
  method: "GET" | "POST" | "DELETE";
  /** `{name}` placeholders name fixture ids (or are replaced by hostile strings). */
  path: string;
  cred: Cred;
  body: "json" | "none" | "multipart";
}

/** Documented operations the fuzz test leaves out, and why. */
export const SKIPPED: Record<string, string> = {
  streamEvents: "an accepted SSE stream never ends; its hostile query input is covered by test/conformance/sse.test.ts",
  validateCredential: "it makes an outbound request to the credential's MCP server, which the fuzz test must not depend on",
};

/** Path parameter → fixture id (hostile-input.test.ts creates one of each). */
const FIXTURE_OF: Record<string, string> = {
  agent_id: "agent",
  environment_id: "env",
  session_id: "session",
  work_id: "work",
  vault_id: "vault",
  credential_id: "credential",
  file_id: "file",
  skill_id: "skill",
  version: "skillversion",
  memory_store_id: "store",
  memory_id: "memory",
  memory_version_id: "memversion",
  resource_id: "resource",
  deployment_id: "deployment",
  deployment_run_id: "deploymentrun",
  endpoint_id: "webhook",
  dream_id: "dream",
  user_profile_id: "userprofile",
  tunnel_id: "tunnel",
  certificate_id: "tunnelcert",
  thread_id: "thread",
};

/** The worker's calls, made with the environment key. */
const ENV_KEY_OPERATIONS = new Set(["pollWork", "listWork", "ackWork", "heartbeatWork", "stopWork"]);

interface DocumentedOperation {
  operationId: string;
  requestBody?: { content: Record<string, unknown> };
}

function bodyOf(op: DocumentedOperation): Route["body"] {
  const types = Object.keys(op.requestBody?.content ?? {});
  if (types.includes("multipart/form-data")) return "multipart";
  return types.includes("application/json") ? "json" : "none";
}

/** Every documented operation (skipped ones included), with its fuzz routes. */
export function documentedRoutes(): Array<{ operationId: string; routes: Route[] }> {
  const doc = openApiDocument("fuzz");
  const out: Array<{ operationId: string; routes: Route[] }> = [];
  for (const [path, item] of Object.entries(doc.paths ?? {})) {
    for (const method of ["get", "post", "delete"] as const) {
      const op = item[method] as DocumentedOperation | undefined;
      if (!op) continue;
      // Work items belong to self-hosted environments.
      const selfHosted = path.includes("/work");
      const fixturePath = path.replace(/\{(\w+)\}/g, (_m, name: string) => {
        const fixture = FIXTURE_OF[name];
        if (!fixture) throw new Error(`no fixture for path parameter {${name}} of ${path}: add one to FIXTURE_OF`);
        return `{${fixture === "env" && selfHosted ? "shenv" : fixture}}`;
      });
      const base: Route = {
        method: method.toUpperCase() as Route["method"],
        path: fixturePath,
        cred: ENV_KEY_OPERATIONS.has(op.operationId) ? "env" : "api",
        body: bodyOf(op),
      };
      const routes = [base];
      // The worker posts results with its sessions token, to its own session.
      if (op.operationId === "sendEvents") routes.push({ ...base, path: base.path.replace("{session}", "{shsession}"), cred: "token" });
      out.push({ operationId: op.operationId, routes });
    }
  }
  return out;
}

export const ROUTES: Route[] = documentedRoutes().flatMap((o) => (SKIPPED[o.operationId] ? [] : o.routes));

/** Field names used across the API: hostile bodies reuse them so validation paths are reached. */
export const FIELD_NAMES = [
  "name",
  "model",
  "system",
  "description",
  "tools",
  "skills",
  "mcp_servers",
  "metadata",
  "version",
  "type",
  "config",
  "networking",
  "allowed_hosts",
  "packages",
  "agent",
  "environment_id",
  "initial_events",
  "resources",
  "vault_ids",
  "title",
  "budget",
  "events",
  "content",
  "text",
  "tool_use_id",
  "custom_tool_use_id",
  "is_error",
  "result",
  "force",
  "display_name",
  "auth",
  "token",
  "path",
  "precondition",
  "content_sha256",
  "file_id",
  "mount_path",
  "memory_store_id",
  "access",
  "id",
  "url",
  "configs",
  "default_config",
  "permission_policy",
  "input_schema",
  "rubric",
  "max_iterations",
  "max_list_cost",
  "amount",
  "currency",
  "authorization_token",
];

export const QUERY_KEYS = [
  "limit",
  "page",
  "order",
  "include_archived",
  "types[]",
  "statuses[]",
  "created_at[gte]",
  "created_at[lt]",
  "agent_id",
  "agent_version",
  "version",
  "block_ms",
  "reclaim_older_than_ms",
  "expected_last_heartbeat",
  "desired_ttl_seconds",
  "view",
  "path_prefix",
  "depth",
  "expected_content_sha256",
  "ids[]",
  "scope_id",
  "memory_id",
  "operation",
  "session_id",
  "after_id",
  "source",
  "event_deltas[]",
];
