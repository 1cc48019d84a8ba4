/**
 * The webhook outbox: `recordWebhookEvents` runs inside the transaction of
 * the change it reports and writes one delivery row per enabled endpoint
 * subscribed to the event type, so an event is delivered iff its change
 * committed, however the process dies afterwards. Endpoints disabled at that
 * moment never get the event (as the Managed Agents API documents).
 */
import type { Database } from "@openma/storage";
import type { Transaction } from "kysely";

/** The organization and workspace a self-hosted server reports in event data (it has one of each). */
export const ORGANIZATION_ID = "org_openma";
export const WORKSPACE_ID = "wrkspc_default";

/**
 * Every event type the SDK 1.10.0 defines (`BetaWebhookEventData`): an
 * endpoint may subscribe to any of them; this server emits EMITTED_EVENT_TYPES.
 */
export const KNOWN_EVENT_TYPES: readonly string[] = [
  "agent.archived",
  "agent.created",
  "agent.deleted",
  "agent.updated",
  "deployment.archived",
  "deployment.created",
  "deployment.deleted",
  "deployment.paused",
  "deployment.unpaused",
  "deployment.updated",
  "deployment_run.failed",
  "deployment_run.started",
  "deployment_run.succeeded",
  "environment.archived",
  "environment.created",
  "environment.deleted",
  "environment.updated",
  "external_key.failed",
  "external_key.recovered",
  "memory_store.archived",
  "memory_store.created",
  "memory_store.deleted",
  "session.archived",
  "session.budget_reached",
  "session.created",
  "session.deleted",
  "session.idled",
  "session.outcome_evaluation_ended",
  "session.pending",
  "session.requires_action",
  "session.running",
  "session.status_idled",
  "session.status_rescheduled",
  "session.status_run_started",
  "session.status_terminated",
  "session.thread_created",
  "session.thread_idled",
  "session.thread_terminated",
  "session.updated",
  "user_profile.enforcement_action_opened",
  "user_profile.enforcement_action_resolved",
  "user_profile.program_status_updated",
  "vault.archived",
  "vault.created",
  "vault.deleted",
  "vault_credential.archived",
  "vault_credential.created",
  "vault_credential.deleted",
  "vault_credential.refresh_failed",
];

/** The event types this server emits (a subset of the SDK's `BetaWebhookEventData` union). */
export const EMITTED_EVENT_TYPES = [
  "session.created",
  "session.status_run_started",
  "session.status_idled",
  "session.status_rescheduled",
  "session.status_terminated",
  "deployment.created",
  "deployment.updated",
  "deployment.paused",
  "deployment.unpaused",
  "deployment.archived",
  "deployment_run.started",
  "deployment_run.succeeded",
  "deployment_run.failed",
  "memory_store.created",
  "memory_store.archived",
  "memory_store.deleted",
  "agent.created",
  "agent.updated",
  "agent.archived",
  "environment.created",
  "environment.updated",
  "environment.archived",
  "environment.deleted",
  "session.updated",
  "session.archived",
  "session.deleted",
  "session.budget_reached",
  "session.outcome_evaluation_ended",
  "session.thread_created",
  "session.thread_idled",
  "session.thread_terminated",
] as const;

export interface WebhookChange {
  /** Event type, e.g. `session.status_idled`. */
  type: string;
  /** The id of the object the event is about (`data.id`). */
  id: string;
  /** Deliveries with one order key reach an endpoint in `orderSeq` order (then creation order). */
  orderKey: string;
  orderSeq: number;
  /** Fields the SDK's event data carries beyond `id` (`session_thread_id` on thread events). */
  extra?: Readonly<Record<string, string>>;
}

export interface OutboxDeps {
  clock: { now(): number };
  ids: (prefix: string) => string;
}

export interface WebhookEventBody {
  type: "event";
  id: string;
  created_at: string;
  data: { type: string; id: string; organization_id: string; workspace_id: string; [field: string]: string };
}

/**
 * One change to an object whose events are ordered by its own id (agents,
 * environments, memory stores, sessions outside the event log): the clock
 * orders them, creation order breaks ties within a millisecond.
 */
export function recordObjectEvent(trx: Transaction<Database>, deps: OutboxDeps, type: string, id: string): Promise<void> {
  return recordWebhookEvents(trx, deps, [{ type, id, orderKey: id, orderSeq: deps.clock.now() }]);
}

export async function recordWebhookEvents(trx: Transaction<Database>, deps: OutboxDeps, changes: readonly WebhookChange[]): Promise<void> {
  if (changes.length === 0) return;
  const endpoints = await trx.selectFrom("webhook_endpoints").select(["id", "body"]).where("state", "=", "enabled").execute();
  if (endpoints.length === 0) return;
  const subscribed = endpoints.map((e) => ({
    id: e.id,
    types: new Set((JSON.parse(e.body) as { enabled_events: string[] }).enabled_events),
  }));
  const nowMs = deps.clock.now();
  const rows: Database["webhook_deliveries"][] = [];
  for (const change of changes) {
    const targets = subscribed.filter((e) => e.types.has(change.type));
    if (targets.length === 0) continue;
    const event: WebhookEventBody = {
      type: "event",
      id: deps.ids("wevt"),
      created_at: new Date(nowMs).toISOString(),
      data: { type: change.type, id: change.id, ...change.extra, organization_id: ORGANIZATION_ID, workspace_id: WORKSPACE_ID },
    };
    const payload = JSON.stringify(event);
    for (const endpoint of targets) {
      rows.push({
        id: deps.ids("whdlv"),
        endpoint_id: endpoint.id,
        event_id: event.id,
        event_type: change.type,
        order_key: change.orderKey,
        order_seq: change.orderSeq,
        payload,
        state: "pending",
        attempts: 0,
        next_attempt_at_ms: nowMs,
        lease_until_ms: 0,
        last_error: null,
        created_at_ms: nowMs,
        finished_at_ms: null,
      });
    }
  }
  if (rows.length) await trx.insertInto("webhook_deliveries").values(rows).execute();
}
