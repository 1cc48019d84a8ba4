/**
 * Superserve's error body, `{error: {code, message}}` (the SDK's
 * `mapApiError` reads both), and the injected faults rendered in it; shared
 * by the control plane and the data plane.
 */
import type { Fault, Hangs, StandInEnv } from "@openma/standin-kit";
import type { Context } from "hono";
import type { SandboxRecord, SandboxTable } from "./sandboxes.ts";

export type Ctx = Context<StandInEnv>;

export function apiError(c: Ctx, status: number, code: string, message: string): Response {
  return c.json({ error: { code, message } }, status as 400);
}

/** A fault's response to send instead of the real one, or null to go on (a `cut` is the stream's to play). */
export async function playFault(
  c: Ctx,
  fault: Fault | undefined,
  context: { hangs: Hangs; table: SandboxTable; record?: SandboxRecord },
): Promise<Response | null> {
  if (fault === undefined || fault.kind === "cut") return null;
  if (fault.kind === "status") return apiError(c, fault.status ?? 500, "internal_error", "An unexpected error occurred");
  if (fault.kind === "rate_limited") {
    c.header("Retry-After", String(fault.retryAfterSeconds ?? 1));
    return apiError(c, 429, "rate_limited", "Rate limit exceeded");
  }
  if (fault.kind === "hang") {
    await context.hangs.hang();
    return apiError(c, 503, "unavailable", "stand-in closing");
  }
  if (context.record) await context.table.destroy(context.record);
  return apiError(c, 404, "not_found", "Sandbox not found");
}
