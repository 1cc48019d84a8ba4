/**
 * The OpenAPI 3.1 document of the whole API, served at `/v1/openapi.json`.
 *
 * Request bodies and query strings are the very zod schemas the routes
 * validate with (imported from the schema modules and route modules), turned
 * into JSON Schema by `zod-openapi` as the *input* a client sends. The
 * operation table below is checked against the router itself
 * (openapi.test.ts): a route missing here, or an operation no route serves,
 * fails the test, and the fuzz suite (test/fuzz) takes its route table from
 * this document.
 */
import { z } from "zod";
import { createDocument, type ZodOpenApiOperationObject, type ZodOpenApiPathsObject } from "zod-openapi";
import { documentQuery, pageOnlyQuery } from "./pagination.ts";
import { agentVersionQuery } from "./routes/agents.ts";
import { deploymentListQuery, deploymentRunListQuery } from "./routes/deployments.ts";
import { dreamCreateSchema, dreamListQuery } from "./routes/dreams.ts";
import { eventListQuery, eventStreamQuery } from "./routes/events.ts";
import { harnessEventsSchema } from "./routes/harness-events.ts";
import { sessionListPageQuery } from "./routes/sessions.ts";
import { threadListQuery } from "./routes/threads.ts";
import { certificateCreateSchema, tunnelCreateSchema, tunnelListQuery, tunnelRotateTokenSchema } from "./routes/tunnels.ts";
import { actionUrlCreateSchema, userProfileCreateSchema, userProfileListQuery, userProfileUpdateSchema } from "./routes/user-profiles.ts";
import { webhookCreateSchema, webhookDeliveriesQuery, webhookListQuery, webhookUpdateSchema } from "./routes/webhooks.ts";
import { workHeartbeatQuery, workPollQuery, workStopBody, workUpdateBody } from "./routes/work.ts";
import { agentCreateSchema, agentUpdateSchema } from "./schemas/agent.ts";
import { deploymentCreateSchema, deploymentUpdateSchema } from "./schemas/deployment.ts";
import { environmentCreateSchema, environmentUpdateSchema } from "./schemas/environment.ts";
import { sendEventsSchema } from "./schemas/events.ts";
import { fileListQuery } from "./schemas/file.ts";
import {
  memoryCreateSchema,
  memoryDeleteQuery,
  memoryListQuery,
  memoryStoreCreateSchema,
  memoryStoreListQuery,
  memoryStoreUpdateSchema,
  memoryUpdateSchema,
  memoryVersionListQuery,
  viewQuery,
} from "./schemas/memory.ts";
import { resourceAddSchema, resourceUpdateSchema, sessionCreateSchema, sessionUpdateSchema } from "./schemas/session.ts";
import { skillListQuery, versionListQuery } from "./schemas/skill.ts";
import { credentialCreateSchema, credentialUpdateSchema, vaultCreateSchema, vaultUpdateSchema } from "./schemas/vault.ts";
import { workspaceQuery } from "./schemas/workspace.ts";

export type HttpMethod = "get" | "post" | "delete";

/** What a request carries besides path and query. */
export type RequestBody = z.ZodType | "multipart" | "none";

/** What a successful answer is. */
export type ResponseKind = "json" | "sse" | "binary";

export interface Operation {
  method: HttpMethod;
  /** OpenAPI form, `{name}` placeholders. */
  path: string;
  operationId: string;
  tag: string;
  summary: string;
  body?: RequestBody;
  query?: z.ZodObject;
  response?: ResponseKind;
}

const op = (
  method: HttpMethod,
  path: string,
  operationId: string,
  summary: string,
  extra: Partial<Pick<Operation, "body" | "query" | "response">> = {},
): Operation => ({ method, path, operationId, summary, tag: path.split("/")[2] ?? "api", ...extra });

/** Every operation of the API, in router order. */
export const OPERATIONS: readonly Operation[] = [
  op("post", "/v1/agents", "createAgent", "Create an agent", { body: agentCreateSchema }),
  op("get", "/v1/agents", "listAgents", "List agents", { query: documentQuery }),
  op("get", "/v1/agents/{agent_id}", "retrieveAgent", "Retrieve an agent (optionally a version)", { query: agentVersionQuery }),
  op("post", "/v1/agents/{agent_id}", "updateAgent", "Update an agent (new version)", { body: agentUpdateSchema }),
  op("post", "/v1/agents/{agent_id}/archive", "archiveAgent", "Archive an agent"),
  op("get", "/v1/agents/{agent_id}/versions", "listAgentVersions", "List an agent's versions", { query: pageOnlyQuery }),

  op("get", "/v1/environments/{environment_id}/work/poll", "pollWork", "Long-poll for work (environment key)", { query: workPollQuery }),
  op("get", "/v1/environments/{environment_id}/work/stats", "workStats", "Work queue statistics"),
  op("get", "/v1/environments/{environment_id}/work", "listWork", "List work items", { query: pageOnlyQuery }),
  op("get", "/v1/environments/{environment_id}/work/{work_id}", "retrieveWork", "Retrieve a work item"),
  op("post", "/v1/environments/{environment_id}/work/{work_id}", "updateWork", "Update a work item's metadata", { body: workUpdateBody }),
  op("post", "/v1/environments/{environment_id}/work/{work_id}/ack", "ackWork", "Acknowledge a claimed work item"),
  op("post", "/v1/environments/{environment_id}/work/{work_id}/heartbeat", "heartbeatWork", "Renew a work item's lease", {
    query: workHeartbeatQuery,
  }),
  op("post", "/v1/environments/{environment_id}/work/{work_id}/stop", "stopWork", "Stop a work item", { body: workStopBody }),
  op("post", "/v1/environments", "createEnvironment", "Create an environment", { body: environmentCreateSchema }),
  op("get", "/v1/environments", "listEnvironments", "List environments", { query: documentQuery }),
  op("get", "/v1/environments/{environment_id}", "retrieveEnvironment", "Retrieve an environment"),
  op("post", "/v1/environments/{environment_id}", "updateEnvironment", "Update an environment", { body: environmentUpdateSchema }),
  op("post", "/v1/environments/{environment_id}/archive", "archiveEnvironment", "Archive an environment"),
  op("delete", "/v1/environments/{environment_id}", "deleteEnvironment", "Delete an environment"),
  op("post", "/v1/environments/{environment_id}/environment_key", "rotateEnvironmentKey", "Rotate a self-hosted environment's key"),

  op("get", "/v1/sessions/{session_id}/events", "listEvents", "List a session's events", { query: eventListQuery }),
  op("post", "/v1/sessions/{session_id}/events", "sendEvents", "Send events to a session", { body: sendEventsSchema }),
  op("get", "/v1/sessions/{session_id}/events/stream", "streamEvents", "Stream a session's events (SSE)", {
    query: eventStreamQuery,
    response: "sse",
  }),
  // OpenMA extension (ADR 0034): the event sink of a harness running inside a self-hosted sandbox.
  op("post", "/v1/sessions/{session_id}/harness/events", "postHarnessEvents", "Post an in-sandbox harness's events", {
    body: harnessEventsSchema,
  }),
  op("post", "/v1/sessions", "createSession", "Create a session", { body: sessionCreateSchema }),
  op("get", "/v1/sessions", "listSessions", "List sessions", { query: sessionListPageQuery }),
  op("get", "/v1/sessions/{session_id}", "retrieveSession", "Retrieve a session"),
  op("post", "/v1/sessions/{session_id}", "updateSession", "Update a session", { body: sessionUpdateSchema }),
  op("delete", "/v1/sessions/{session_id}", "deleteSession", "Delete a session"),
  op("post", "/v1/sessions/{session_id}/archive", "archiveSession", "Archive a session"),
  op("get", "/v1/sessions/{session_id}/resources", "listSessionResources", "List a session's resources", { query: pageOnlyQuery }),
  op("post", "/v1/sessions/{session_id}/resources", "addSessionResource", "Attach a file to a session", { body: resourceAddSchema }),
  op("get", "/v1/sessions/{session_id}/resources/{resource_id}", "retrieveSessionResource", "Retrieve a session resource"),
  op("post", "/v1/sessions/{session_id}/resources/{resource_id}", "updateSessionResource", "Rotate a repository resource's token", {
    body: resourceUpdateSchema,
  }),
  op("delete", "/v1/sessions/{session_id}/resources/{resource_id}", "deleteSessionResource", "Detach a session resource"),
  op("get", "/v1/sessions/{session_id}/threads", "listSessionThreads", "List a session's threads", { query: threadListQuery }),
  op("get", "/v1/sessions/{session_id}/threads/{thread_id}", "retrieveSessionThread", "Retrieve a session thread"),
  op("post", "/v1/sessions/{session_id}/threads/{thread_id}/archive", "archiveSessionThread", "Archive a session thread"),
  op("get", "/v1/sessions/{session_id}/threads/{thread_id}/events", "listSessionThreadEvents", "List a thread's events", {
    query: eventListQuery,
  }),
  op("get", "/v1/sessions/{session_id}/threads/{thread_id}/stream", "streamSessionThreadEvents", "Stream a thread's events (SSE)", {
    query: eventStreamQuery,
    response: "sse",
  }),
  // OpenMA extension: the console's workspace browser.
  op("get", "/v1/sessions/{session_id}/workspace", "listWorkspace", "List a directory of a session's workspace (OpenMA extension)", {
    query: workspaceQuery,
  }),
  op(
    "get",
    "/v1/sessions/{session_id}/workspace/content",
    "downloadWorkspaceFile",
    "Download a session's workspace file (OpenMA extension)",
    {
      query: workspaceQuery,
      response: "binary",
    },
  ),

  op("post", "/v1/vaults", "createVault", "Create a vault", { body: vaultCreateSchema }),
  op("get", "/v1/vaults", "listVaults", "List vaults", { query: documentQuery }),
  op("get", "/v1/vaults/{vault_id}", "retrieveVault", "Retrieve a vault"),
  op("post", "/v1/vaults/{vault_id}", "updateVault", "Update a vault", { body: vaultUpdateSchema }),
  op("delete", "/v1/vaults/{vault_id}", "deleteVault", "Delete a vault"),
  op("post", "/v1/vaults/{vault_id}/archive", "archiveVault", "Archive a vault"),
  op("post", "/v1/vaults/{vault_id}/credentials", "createCredential", "Create a credential", { body: credentialCreateSchema }),
  op("get", "/v1/vaults/{vault_id}/credentials", "listCredentials", "List a vault's credentials", { query: documentQuery }),
  op("get", "/v1/vaults/{vault_id}/credentials/{credential_id}", "retrieveCredential", "Retrieve a credential"),
  op("post", "/v1/vaults/{vault_id}/credentials/{credential_id}", "updateCredential", "Update a credential", {
    body: credentialUpdateSchema,
  }),
  op("delete", "/v1/vaults/{vault_id}/credentials/{credential_id}", "deleteCredential", "Delete a credential"),
  op("post", "/v1/vaults/{vault_id}/credentials/{credential_id}/archive", "archiveCredential", "Archive a credential"),
  op("post", "/v1/vaults/{vault_id}/credentials/{credential_id}/mcp_oauth_validate", "validateCredential", "Check an MCP OAuth credential"),

  op("post", "/v1/files", "uploadFile", "Upload a file", { body: "multipart" }),
  op("get", "/v1/files", "listFiles", "List files", { query: fileListQuery }),
  op("get", "/v1/files/{file_id}", "retrieveFile", "Retrieve a file's metadata"),
  op("get", "/v1/files/{file_id}/content", "downloadFile", "Download a file", { response: "binary" }),
  op("delete", "/v1/files/{file_id}", "deleteFile", "Delete a file"),

  op("post", "/v1/skills", "createSkill", "Create a skill from uploaded files", { body: "multipart" }),
  op("get", "/v1/skills", "listSkills", "List skills", { query: skillListQuery }),
  op("get", "/v1/skills/{skill_id}", "retrieveSkill", "Retrieve a skill"),
  op("delete", "/v1/skills/{skill_id}", "deleteSkill", "Delete a skill"),
  op("post", "/v1/skills/{skill_id}/versions", "createSkillVersion", "Upload a new skill version", { body: "multipart" }),
  op("get", "/v1/skills/{skill_id}/versions", "listSkillVersions", "List a skill's versions", { query: versionListQuery }),
  op("get", "/v1/skills/{skill_id}/versions/{version}", "retrieveSkillVersion", "Retrieve a skill version"),
  op("get", "/v1/skills/{skill_id}/versions/{version}/content", "downloadSkillVersion", "Download a skill version (zip)", {
    response: "binary",
  }),
  op("delete", "/v1/skills/{skill_id}/versions/{version}", "deleteSkillVersion", "Delete a skill version"),

  op("post", "/v1/memory_stores", "createMemoryStore", "Create a memory store", { body: memoryStoreCreateSchema }),
  op("get", "/v1/memory_stores", "listMemoryStores", "List memory stores", { query: memoryStoreListQuery }),
  op("get", "/v1/memory_stores/{memory_store_id}", "retrieveMemoryStore", "Retrieve a memory store"),
  op("post", "/v1/memory_stores/{memory_store_id}", "updateMemoryStore", "Update a memory store", { body: memoryStoreUpdateSchema }),
  op("delete", "/v1/memory_stores/{memory_store_id}", "deleteMemoryStore", "Delete a memory store"),
  op("post", "/v1/memory_stores/{memory_store_id}/archive", "archiveMemoryStore", "Archive a memory store"),
  op("post", "/v1/memory_stores/{memory_store_id}/memories", "createMemory", "Create a memory", {
    body: memoryCreateSchema,
    query: viewQuery,
  }),
  op("get", "/v1/memory_stores/{memory_store_id}/memories", "listMemories", "List memories", { query: memoryListQuery }),
  op("get", "/v1/memory_stores/{memory_store_id}/memories/{memory_id}", "retrieveMemory", "Retrieve a memory", { query: viewQuery }),
  op("post", "/v1/memory_stores/{memory_store_id}/memories/{memory_id}", "updateMemory", "Update a memory", {
    body: memoryUpdateSchema,
    query: viewQuery,
  }),
  op("delete", "/v1/memory_stores/{memory_store_id}/memories/{memory_id}", "deleteMemory", "Delete a memory", {
    query: memoryDeleteQuery,
  }),
  op("get", "/v1/memory_stores/{memory_store_id}/memory_versions", "listMemoryVersions", "List memory versions", {
    query: memoryVersionListQuery,
  }),
  op(
    "get",
    "/v1/memory_stores/{memory_store_id}/memory_versions/{memory_version_id}",
    "retrieveMemoryVersion",
    "Retrieve a memory version",
    {
      query: viewQuery,
    },
  ),
  op(
    "post",
    "/v1/memory_stores/{memory_store_id}/memory_versions/{memory_version_id}/redact",
    "redactMemoryVersion",
    "Redact a memory version",
  ),

  op("post", "/v1/deployments", "createDeployment", "Create a deployment", { body: deploymentCreateSchema }),
  op("get", "/v1/deployments", "listDeployments", "List deployments", { query: deploymentListQuery }),
  op("get", "/v1/deployments/{deployment_id}", "retrieveDeployment", "Retrieve a deployment"),
  op("post", "/v1/deployments/{deployment_id}", "updateDeployment", "Update a deployment", { body: deploymentUpdateSchema }),
  op("post", "/v1/deployments/{deployment_id}/archive", "archiveDeployment", "Archive a deployment"),
  op("post", "/v1/deployments/{deployment_id}/pause", "pauseDeployment", "Pause a deployment's schedule"),
  op("post", "/v1/deployments/{deployment_id}/unpause", "unpauseDeployment", "Unpause a deployment's schedule"),
  op("post", "/v1/deployments/{deployment_id}/run", "runDeployment", "Run a deployment now"),
  op("get", "/v1/deployment_runs", "listDeploymentRuns", "List deployment runs", { query: deploymentRunListQuery }),
  op("get", "/v1/deployment_runs/{deployment_run_id}", "retrieveDeploymentRun", "Retrieve a deployment run"),

  op("post", "/v1/organizations/webhooks", "createWebhookEndpoint", "Create a webhook endpoint (signing secret shown once)", {
    body: webhookCreateSchema,
  }),
  op("get", "/v1/organizations/webhooks", "listWebhookEndpoints", "List webhook endpoints", { query: webhookListQuery }),
  op("get", "/v1/organizations/webhooks/{endpoint_id}", "retrieveWebhookEndpoint", "Retrieve a webhook endpoint"),
  op("post", "/v1/organizations/webhooks/{endpoint_id}", "updateWebhookEndpoint", "Update a webhook endpoint", {
    body: webhookUpdateSchema,
  }),
  op("delete", "/v1/organizations/webhooks/{endpoint_id}", "deleteWebhookEndpoint", "Delete a webhook endpoint"),
  op(
    "post",
    "/v1/organizations/webhooks/{endpoint_id}/regenerate_signing_secret",
    "regenerateWebhookSigningSecret",
    "Replace a webhook endpoint's signing secret",
  ),
  op(
    "get",
    "/v1/organizations/webhooks/{endpoint_id}/deliveries",
    "listWebhookDeliveries",
    "List an endpoint's deliveries (dead-letter included)",
    {
      query: webhookDeliveriesQuery,
    },
  ),
  op("post", "/v1/dreams", "createDream", "Start a dream (reorganizes a memory store from past sessions)", { body: dreamCreateSchema }),
  op("get", "/v1/dreams", "listDreams", "List dreams", { query: dreamListQuery }),
  op("get", "/v1/dreams/{dream_id}", "retrieveDream", "Retrieve a dream"),
  op("post", "/v1/dreams/{dream_id}/cancel", "cancelDream", "Cancel a pending or running dream"),
  op("post", "/v1/dreams/{dream_id}/archive", "archiveDream", "Archive an ended dream"),
  op("post", "/v1/user_profiles", "createUserProfile", "Create a user profile", { body: userProfileCreateSchema }),
  op("get", "/v1/user_profiles", "listUserProfiles", "List user profiles", { query: userProfileListQuery }),
  op("get", "/v1/user_profiles/{user_profile_id}", "retrieveUserProfile", "Retrieve a user profile"),
  op("post", "/v1/user_profiles/{user_profile_id}", "updateUserProfile", "Update a user profile", { body: userProfileUpdateSchema }),
  op("delete", "/v1/user_profiles/{user_profile_id}", "deleteUserProfile", "Delete a user profile"),
  op(
    "post",
    "/v1/user_profiles/{user_profile_id}/enrollment_url",
    "createUserProfileEnrollmentUrl",
    "Enrollment URL (not honoured: no hosted page)",
  ),
  op("post", "/v1/user_profiles/{user_profile_id}/action_urls", "createUserProfileActionUrl", "Action URL (not honoured: no hosted page)", {
    body: actionUrlCreateSchema,
  }),
  op("post", "/v1/tunnels", "createTunnel", "Create an MCP tunnel record", { body: tunnelCreateSchema }),
  op("get", "/v1/tunnels", "listTunnels", "List tunnels", { query: tunnelListQuery }),
  op("get", "/v1/tunnels/{tunnel_id}", "retrieveTunnel", "Retrieve a tunnel"),
  op("post", "/v1/tunnels/{tunnel_id}/archive", "archiveTunnel", "Archive a tunnel"),
  op("post", "/v1/tunnels/{tunnel_id}/reveal_token", "revealTunnelToken", "Reveal the tunnel token (not honoured: no tunnel edge)"),
  op("post", "/v1/tunnels/{tunnel_id}/rotate_token", "rotateTunnelToken", "Rotate the tunnel token (not honoured: no tunnel edge)", {
    body: tunnelRotateTokenSchema,
  }),
  op("post", "/v1/tunnels/{tunnel_id}/certificates", "createTunnelCertificate", "Add a CA certificate to a tunnel", {
    body: certificateCreateSchema,
  }),
  op("get", "/v1/tunnels/{tunnel_id}/certificates", "listTunnelCertificates", "List a tunnel's certificates", { query: tunnelListQuery }),
  op("get", "/v1/tunnels/{tunnel_id}/certificates/{certificate_id}", "retrieveTunnelCertificate", "Retrieve a tunnel certificate"),
  op("post", "/v1/tunnels/{tunnel_id}/certificates/{certificate_id}/archive", "archiveTunnelCertificate", "Archive a tunnel certificate"),
];

/** One tag per resource family (the second path segment). */
export const TAG_NAMES: Record<string, string> = {
  agents: "Agents and their versions",
  environments: "Environments, their keys and the self-hosted work queue",
  sessions: "Sessions, their events (list, send, stream), resources and threads",
  vaults: "Vaults and credentials",
  files: "Files",
  skills: "Skills and skill versions",
  memory_stores: "Memory stores, memories and memory versions",
  deployments: "Deployments: an agent, an environment and initial events, run on a cron schedule or on demand",
  deployment_runs: "Deployment runs: one immutable record per run",
  organizations: "Organization webhook endpoints and their deliveries",
  dreams: "Dreams: jobs that reorganize a memory store from past sessions",
  user_profiles: "User profiles of the end users an application acts for",
  tunnels: "MCP tunnels and the CA certificates they trust (records only: no tunnel edge)",
};

const errorBody = z
  .object({
    type: z.literal("error"),
    error: z.object({ type: z.string(), message: z.string() }).loose(),
    request_id: z.string().nullable(),
  })
  .meta({ id: "Error" });

/** Response bodies are not modelled as zod schemas (the SDK's types are their reference): any JSON object. */
const jsonObject = z.object({}).loose();

function pathParams(path: string): z.ZodObject | undefined {
  const names = [...path.matchAll(/\{(\w+)\}/g)].map((m) => m[1] as string);
  if (names.length === 0) return undefined;
  return z.object(Object.fromEntries(names.map((n) => [n, z.string().max(256)])));
}

function successContent(kind: ResponseKind) {
  if (kind === "sse") return { "text/event-stream": { schema: z.string() } };
  if (kind === "binary") return { "application/octet-stream": { schema: z.string().meta({ format: "binary" }) } };
  return { "application/json": { schema: jsonObject } };
}

function requestBody(body: RequestBody | undefined) {
  if (!body || body === "none") return undefined;
  if (body === "multipart") {
    return { required: true, content: { "multipart/form-data": { schema: z.object({}).loose() } } };
  }
  return { required: true, content: { "application/json": { schema: body } } };
}

function operationObject(o: Operation): ZodOpenApiOperationObject {
  const path = pathParams(o.path);
  const body = requestBody(o.body);
  return {
    operationId: o.operationId,
    summary: o.summary,
    tags: [o.tag],
    ...(path || o.query ? { requestParams: { ...(path ? { path } : {}), ...(o.query ? { query: o.query } : {}) } } : {}),
    ...(body ? { requestBody: body } : {}),
    responses: {
      "200": { description: "Success", content: successContent(o.response ?? "json") },
      "4XX": { description: "The API's error body", content: { "application/json": { schema: errorBody } } },
    },
  };
}

/** Builds the document (cheap enough to build per request; cached by the route). */
export function openApiDocument(version: string) {
  const paths: ZodOpenApiPathsObject = {};
  for (const o of OPERATIONS) {
    paths[o.path] = { ...paths[o.path], [o.method]: operationObject(o) };
  }
  return createDocument({
    openapi: "3.1.0",
    info: {
      title: "OpenMA Managed Agents API",
      version,
      description: "Anthropic's Managed Agents API as served by OpenMA; the official SDK works against it by changing baseURL.",
    },
    servers: [{ url: "/", description: "This server" }],
    security: [{ apiKey: [] }, { bearer: [] }],
    components: {
      securitySchemes: {
        apiKey: { type: "apiKey", in: "header", name: "x-api-key", description: "An API key" },
        bearer: { type: "http", scheme: "bearer", description: "An API key, an environment key or a sessions token" },
      },
    },
    tags: Object.entries(TAG_NAMES).map(([name, description]) => ({ name, description })),
    paths,
  });
}
