/**
 * Deployment request schemas and response shapes (the SDK's
 * `beta.deployments` / `beta.deploymentRuns`). A deployment pins an agent
 * version and carries what each run creates a session from.
 */
import { cronProblem } from "@openma/scheduler";
import { z } from "zod";
import { metadataPatchSchema, metadataSchema, queryBool } from "../validate.ts";
import { defineOutcomeParam, sendEventsProblem, systemMessageParam, userMessageParam } from "./events.ts";
import { budgetSchema, fileResourceParam, githubResourceParam, memoryStoreResourceParam, type ResourceParam } from "./session.ts";

const id = z.string().min(1).max(256);

const agentParam = z.union([
  id,
  z.object({
    type: z.literal("agent"),
    id,
    version: z
      .number()
      .int()
      .min(1)
      .max(2 ** 31 - 1)
      .optional(),
  }),
]);
export type DeploymentAgentParam = z.infer<typeof agentParam>;

export const scheduleParam = z
  .object({ type: z.literal("cron"), expression: z.string().min(1).max(256), timezone: z.string().min(1).max(64) })
  .superRefine((s, ctx) => {
    const problem = cronProblem(s);
    if (problem) ctx.addIssue({ code: "custom", message: problem });
  });

// Credentials of a repository are write-only and need sealing at rest: not accepted on deployments yet (docs/deployments.md).
const deploymentGithubParam = githubResourceParam.extend({
  authorization_token: z
    .undefined({ error: "authorization_token is not supported on deployments; attach the repository per session" })
    .optional(),
});

const resourcesParam = z.array(z.discriminatedUnion("type", [deploymentGithubParam, fileResourceParam, memoryStoreResourceParam])).max(500);

export const initialEventsParam = z
  .array(z.discriminatedUnion("type", [userMessageParam, defineOutcomeParam, systemMessageParam]))
  .min(1)
  .max(50)
  .superRefine((events, ctx) => {
    const problem = sendEventsProblem(events);
    if (problem) ctx.addIssue({ code: "custom", message: problem.replace(/^events/, "") });
  });
export type DeploymentInitialEvent = z.infer<typeof initialEventsParam>[number];

export const deploymentCreateSchema = z.object({
  agent: agentParam,
  environment_id: id,
  initial_events: initialEventsParam,
  name: z.string().min(1).max(256),
  budget: budgetSchema.nullish(),
  description: z.string().max(2048).nullish(),
  metadata: metadataSchema.optional(),
  resources: resourcesParam.optional(),
  schedule: scheduleParam.nullish(),
  vault_ids: z.array(id).max(50).optional(),
});

export const deploymentUpdateSchema = z.object({
  agent: agentParam.optional(),
  budget: budgetSchema.nullish(),
  description: z.string().max(2048).nullish(),
  environment_id: id.optional(),
  initial_events: initialEventsParam.optional(),
  metadata: metadataPatchSchema.nullish(),
  name: z.string().min(1).max(256).optional(),
  resources: resourcesParam.nullish(),
  schedule: scheduleParam.nullish(),
  vault_ids: z.array(id).max(50).nullish(),
});

const timestamp = z.iso.datetime({ offset: true });

export const deploymentListFilters = z.object({
  agent_id: id.optional(),
  "created_at[gte]": timestamp.optional(),
  "created_at[lte]": timestamp.optional(),
  include_archived: queryBool.optional(),
  status: z.enum(["active", "paused"]).optional(),
});

export const deploymentRunListFilters = z.object({
  "created_at[gt]": timestamp.optional(),
  "created_at[gte]": timestamp.optional(),
  "created_at[lt]": timestamp.optional(),
  "created_at[lte]": timestamp.optional(),
  deployment_id: id.optional(),
  has_error: queryBool.optional(),
  trigger_type: z.enum(["schedule", "manual"]).optional(),
});

export interface StoredSchedule {
  type: "cron";
  expression: string;
  timezone: string;
  last_run_at: string | null;
}

export type PausedReason = { type: "manual" } | { type: "error"; error: { type: string } };

/** The stored deployment document; `schedule.upcoming_runs_at` is computed when served. */
export interface Deployment {
  type: "deployment";
  id: string;
  name: string;
  description: string | null;
  agent: { type: "agent"; id: string; version: number };
  environment_id: string;
  initial_events: DeploymentInitialEvent[];
  metadata: Record<string, string>;
  resources: Record<string, unknown>[];
  schedule: StoredSchedule | null;
  status: "active" | "paused";
  paused_reason: PausedReason | null;
  vault_ids: string[];
  budget: z.infer<typeof budgetSchema> | null;
  created_at: string;
  updated_at: string;
  archived_at: string | null;
}

export interface DeploymentRun {
  type: "deployment_run";
  id: string;
  deployment_id: string;
  agent: { type: "agent"; id: string; version: number };
  session_id: string | null;
  error: { type: string; message: string } | null;
  trigger_context: { type: "manual" } | { type: "schedule"; scheduled_at: string };
  created_at: string;
}

/** A resource as the deployment echoes it (no write-only fields). */
export function echoResource(p: ResourceParam): Record<string, unknown> {
  if (p.type === "github_repository") return { type: p.type, url: p.url, checkout: p.checkout ?? null, mount_path: p.mount_path ?? null };
  if (p.type === "file") return { type: p.type, file_id: p.file_id, mount_path: p.mount_path ?? null };
  return { type: p.type, memory_store_id: p.memory_store_id, access: p.access ?? "read_write", instructions: p.instructions ?? null };
}
