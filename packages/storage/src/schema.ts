/**
 * Row types of every table. JSON documents are stored as TEXT on both
 * backends so one migration set and one query set serve SQLite and Postgres.
 * Timestamps are RFC 3339 strings with millisecond precision (fixed width, so
 * they sort lexicographically in both engines).
 */
export interface ApiKeyRow {
  id: string;
  key_hash: string;
  name: string;
  created_at: string;
  revoked_at: string | null;
}

export interface AgentRow {
  id: string;
  version: number;
  name: string;
  body: string;
  created_at: string;
  updated_at: string;
  archived_at: string | null;
}

export interface AgentVersionRow {
  agent_id: string;
  version: number;
  body: string;
  created_at: string;
}

export interface EnvironmentRow {
  id: string;
  name: string;
  config_type: string;
  body: string;
  created_at: string;
  updated_at: string;
  archived_at: string | null;
}

export interface EnvironmentKeyRow {
  key_hash: string;
  environment_id: string;
  created_at: string;
  revoked_at: string | null;
}

export interface SessionRow {
  id: string;
  agent_id: string;
  agent_version: number;
  environment_id: string;
  status: string;
  body: string;
  /** Highest event sequence number appended so far (the event log's head). */
  last_seq: number;
  created_at: string;
  updated_at: string;
  archived_at: string | null;
  /** The pinned ACP agent release as JSON, or null: the default harness (migration 0022). */
  acp_release?: string | null;
}

export interface SessionEventRow {
  session_id: string;
  seq: number;
  id: string;
  type: string;
  processed_at: string;
  body: string;
  /** Uniqueness key for idempotent appends (e.g. one tool result per tool_use_id). */
  dedupe_key: string | null;
  /** The thread the event belongs to; null for the primary thread (migration 0020). */
  thread_id?: string | null;
}

export interface SessionResourceRow {
  id: string;
  session_id: string;
  type: string;
  body: string;
  /** Secret material (a GitHub `authorization_token`): never returned by the API. */
  secret: string | null;
  created_at: string;
  updated_at: string;
}

export interface WorkItemRow {
  id: string;
  environment_id: string;
  session_id: string | null;
  data: string;
  state: string;
  metadata: string;
  created_at: string;
  acknowledged_at: string | null;
  started_at: string | null;
  latest_heartbeat_at: string | null;
  /** The exact `last_heartbeat` string last returned; compared verbatim on heartbeat. */
  last_heartbeat: string | null;
  stop_requested_at: string | null;
  stopped_at: string | null;
  polled_at: string | null;
  polled_by: string | null;
  lease_expires_at: string | null;
  ttl_seconds: number;
  token_hash: string | null;
  /** Session log position this item is known to have served (migration 0006: not null, default 0; optional on insert). */
  served_seq?: number;
  /** W3C trace context of the request that queued the item, or null (migration 0023; optional on insert). */
  traceparent?: string | null;
}

/** Last poll of each `Anthropic-Worker-ID` per environment (queue stats). */
export interface WorkPollerRow {
  environment_id: string;
  worker_id: string;
  last_seen_at: string;
}

export interface VaultRow {
  id: string;
  body: string;
  created_at: string;
  updated_at: string;
  archived_at: string | null;
}

export interface VaultCredentialRow {
  id: string;
  vault_id: string;
  body: string;
  /** Secret material (tokens, secret values): never returned by the API. */
  secret: string;
  created_at: string;
  updated_at: string;
  archived_at: string | null;
}

export interface FileRow {
  id: string;
  filename: string;
  mime_type: string;
  size_bytes: number;
  sha256: string;
  blob_key: string;
  scope: string | null;
  downloadable: number;
  expires_at: string | null;
  created_at: string;
}

export interface SkillRow {
  id: string;
  display_name: string;
  source: string;
  latest_version_id: string | null;
  created_at: string;
  updated_at: string;
}

export interface SkillVersionRow {
  id: string;
  skill_id: string;
  name: string;
  description: string;
  blob_key: string;
  created_at: string;
}

export interface MemoryStoreRow {
  id: string;
  body: string;
  created_at: string;
  updated_at: string;
  archived_at: string | null;
}

export interface MemoryRow {
  id: string;
  memory_store_id: string;
  path: string;
  content: string;
  content_sha256: string;
  content_size_bytes: number;
  memory_version_id: string;
  created_at: string;
  updated_at: string;
}

export interface MemoryVersionRow {
  id: string;
  memory_id: string;
  memory_store_id: string;
  operation: string;
  path: string | null;
  content: string | null;
  content_sha256: string | null;
  content_size_bytes: number | null;
  created_by: string | null;
  created_at: string;
  redacted_at: string | null;
  /** Actor JSON of the redaction (migration 0004). */
  redacted_by: string | null;
}

export interface Database {
  api_keys: ApiKeyRow;
  agents: AgentRow;
  agent_versions: AgentVersionRow;
  environments: EnvironmentRow;
  environment_keys: EnvironmentKeyRow;
  sessions: SessionRow;
  session_events: SessionEventRow;
  session_resources: SessionResourceRow;
  work_items: WorkItemRow;
  work_pollers: WorkPollerRow;
  vaults: VaultRow;
  vault_credentials: VaultCredentialRow;
  files: FileRow;
  skills: SkillRow;
  skill_versions: SkillVersionRow;
  memory_stores: MemoryStoreRow;
  memories: MemoryRow;
  memory_versions: MemoryVersionRow;
  runtime_fences: RuntimeFenceRow;
  runtime_publications: RuntimePublicationRow;
  runtime_orphans: RuntimeOrphanRow;
  session_executions: SessionExecutionRow;
  sandbox_owners: SandboxOwnerRow;
  openma_deployment: { id: string };
  session_activity: SessionActivityRow;
  session_compactions: SessionCompactionRow;
  session_threads: SessionThreadRow;
  deployments: DeploymentRow;
  deployment_runs: DeploymentRunRow;
  webhook_endpoints: WebhookEndpointRow;
  webhook_deliveries: WebhookDeliveryRow;
  dreams: DreamRow;
  user_profiles: DocumentRow;
  tunnels: DocumentRow;
  tunnel_certificates: TunnelCertificateRow;
}

/** One resource fence per runtime scope (times are epoch ms; refs are canonical JSON). */
export interface RuntimeFenceRow {
  scope_key: string;
  environment_id: string;
  session_id: string;
  generation: number;
  owner_id: string;
  token_hash: string;
  acquired_at_ms: number;
  expires_at_ms: number;
  released_at_ms: number | null;
  revision: number;
  published_generation: number | null;
  published_at_ms: number | null;
  workspace_ref: string | null;
  outputs_ref: string | null;
  runtime_checkpoint_ref: string | null;
}

/** One row per fenced publication: the active pointers after that revision. */
export interface RuntimePublicationRow {
  scope_key: string;
  revision: number;
  generation: number;
  owner_id: string;
  idempotency_key: string;
  request_digest: string;
  workspace_ref: string | null;
  outputs_ref: string | null;
  runtime_checkpoint_ref: string | null;
  published_at_ms: number;
}

/** Token-free record of compute whose hard kill failed. */
export interface RuntimeOrphanRow {
  id: string;
  scope_key: string;
  environment_id: string;
  session_id: string;
  generation: number;
  provider: string;
  runtime_id: string;
  lease: string;
  reason: string;
  state: string;
  attempts: number;
  next_attempt_at_ms: number;
  last_error: string | null;
  created_at_ms: number;
  updated_at_ms: number;
  resolved_at_ms: number | null;
}

/** The session execution queue (migration 0006): one row per session; times are epoch ms. */
export interface SessionExecutionRow {
  session_id: string;
  /** idle | pending | running */
  state: string;
  requested_version: number;
  claimed_version: number;
  requested_at_ms: number;
  available_at_ms: number;
  generation: number;
  owner_id: string | null;
  token_hash: string | null;
  expires_at_ms: number;
  claimed_at_ms: number | null;
  attempts: number;
  last_error: string | null;
  /** W3C trace context of the request that queued the pending turn, or null (migration 0023; optional on insert). */
  traceparent?: string | null;
}

/** Owner record of a serve-lane sandbox (migration 0007); times are epoch ms. */
export interface SandboxOwnerRow {
  id: string;
  deployment: string;
  driver: string;
  environment_id: string;
  session_id: string;
  provider_id: string | null;
  lease: string | null;
  created_at_ms: number;
  last_used_at_ms: number;
  idle_deadline_at_ms: number;
  lease_expires_at_ms: number;
}

/** Time a session spent running (epoch ms from the injected clock); see migration 0015. */
export interface SessionActivityRow {
  session_id: string;
  /** Sum of the closed running intervals. */
  active_ms: number;
  /** Start of the open running interval; null while the session is not running. */
  running_since_ms: number | null;
}

/** The summary behind one `agent.thread_context_compacted` event (migration 0019). */
export interface SessionCompactionRow {
  session_id: string;
  event_id: string;
  /** Content events at or after this seq stay in the conversation verbatim. */
  kept_from_seq: number;
  summary: string;
}

/** One thread of a multi-agent session (migration 0020): `body` is the thread resource's stored part. */
export interface SessionThreadRow {
  id: string;
  session_id: string;
  /** Null for the primary (coordinator) thread. */
  parent_thread_id: string | null;
  agent_name: string;
  body: string;
  created_at: string;
  archived_at: string | null;
}

/** A deployment (migration 0016): `body` is the API document; the other columns serve the scheduler. */
export interface DeploymentRow {
  id: string;
  agent_id: string;
  /** active | paused */
  status: string;
  body: string;
  schedule_expression: string | null;
  schedule_timezone: string | null;
  /** Occurrences at or before this instant (epoch ms) never fire. */
  schedule_anchor_ms: number | null;
  /** The newest occurrence fired (epoch ms). */
  last_scheduled_ms: number | null;
  created_at: string;
  updated_at: string;
  archived_at: string | null;
}

/** One immutable deployment run (migration 0016); unique per (deployment_id, scheduled_at). */
export interface DeploymentRunRow {
  id: string;
  deployment_id: string;
  /** schedule | manual */
  trigger_type: string;
  scheduled_at: string | null;
  /** 1 when the run records a failure, else 0. */
  has_error: number;
  body: string;
  created_at: string;
}

/** A webhook endpoint (migration 0017); `secret` is the `whsec_` signing secret. */
export interface WebhookEndpointRow {
  id: string;
  body: string;
  secret: string;
  /** enabled | disabled */
  state: string;
  created_at: string;
}

/** One event to one endpoint (migration 0017): the outbox row and its delivery state. */
export interface WebhookDeliveryRow {
  id: string;
  endpoint_id: string;
  event_id: string;
  event_type: string;
  order_key: string;
  order_seq: number;
  payload: string;
  /** pending | delivered | dead */
  state: string;
  attempts: number;
  next_attempt_at_ms: number;
  lease_until_ms: number;
  last_error: string | null;
  created_at_ms: number;
  finished_at_ms: number | null;
}

/** A dream (migration 0018): `body` is the API document; `status` and `output_store_id` serve the update_existing conflict check. */
export interface DreamRow {
  id: string;
  body: string;
  status: string;
  output_store_id: string | null;
  /** The API key whose memory versions the dream writes (the creator's). */
  owner_key_id: string;
  created_at: string;
  archived_at: string | null;
}

/** A table of one JSON document per row (user_profiles, tunnels; migration 0018). */
export interface DocumentRow {
  id: string;
  body: string;
  created_at: string;
  archived_at: string | null;
}

/** A CA certificate a tunnel trusts (migration 0018). */
export interface TunnelCertificateRow {
  id: string;
  tunnel_id: string;
  /** SHA-256 of the certificate's DER, lowercase hex pairs joined by colons. */
  fingerprint: string;
  body: string;
  created_at: string;
  archived_at: string | null;
}
