/**
 * OpenMA extension: `POST /v1/sessions/{id}/harness/events`, the Session
 * event sink of a harness that runs INSIDE a self-hosted sandbox (the
 * `openma_supervised` lane, docs/acp.md "In the runtime host"). The public
 * send-events route takes user events only; a harness whose brain is not on
 * this server has to publish what it did (messages, thinking, tool use and
 * results, model-request spans, status) itself.
 *
 * Accepted only with the sessions token of the session's live Work item
 * (the claim-bound bearer, rotated on reclaim: a stale sandbox is refused),
 * and only when this server does not run the session's brain (one
 * scheduling authority: `OPENMA_SELF_HOSTED_BRAIN=work_item`). Each event
 * carries the harness's own id, used as the dedupe key, so a retried post
 * appends nothing twice.
 */
import { brainRunsOnServer } from "@openma/execution/placement";
import { Hono } from "hono";
import { z } from "zod";
import { assertSessionScope, requireCredential } from "../auth.ts";
import type { AppEnv } from "../context.ts";
import { badRequest } from "../errors.ts";
import { appendEvents } from "../event-log.ts";
import { limitBody } from "../uploads.ts";
import { pathId } from "../util.ts";
import { parseJsonBody } from "../validate.ts";
import { EVENTS_BODY_LIMIT, environmentType, loadSessionRow } from "./sessions.ts";

/** What a harness reports; user events keep going through the public route. */
export const HARNESS_EVENT_TYPES = [
  "agent.message",
  "agent.thinking",
  "agent.tool_use",
  "agent.tool_result",
  "span.model_request_start",
  "span.model_request_end",
  "session.status_running",
  "session.status_idle",
  "session.warning",
  "session.error",
] as const;

const harnessEvent = z.object({ id: z.string().min(1).max(256), type: z.enum(HARNESS_EVENT_TYPES) }).catchall(z.unknown());

export const harnessEventsSchema = z.object({ events: z.array(harnessEvent).min(1).max(500) });

export function harnessEventRoutes(): Hono<AppEnv> {
  const r = new Hono<AppEnv>();
  r.post("/:session_id/harness/events", limitBody(EVENTS_BODY_LIMIT, "request body"), async (c) => {
    const sessionId = pathId(c, "session_id");
    const credential = requireCredential(c, "sessions_token");
    const deps = c.get("deps");
    const session = await loadSessionRow(deps.storage.db, sessionId);
    assertSessionScope(credential, sessionId, session.environment_id);
    if (brainRunsOnServer(await environmentType(deps.storage.db, session.environment_id), deps.selfHostedBrain))
      throw badRequest("this server runs the session's harness itself: harness events are accepted only from an in-sandbox harness");
    const input = await parseJsonBody(c, harnessEventsSchema);
    const drafts = input.events.map(({ id, type, ...fields }) => ({ type, fields, dedupeKey: `harness:${id}` }));
    const result = await appendEvents(deps, sessionId, drafts);
    return c.json({ data: result.events.map((e) => ({ id: e.id, type: e.type })) });
  });
  return r;
}
