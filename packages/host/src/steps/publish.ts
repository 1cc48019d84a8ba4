/**
 * Step `publish`: one fenced compare-and-set of every pointer, under an
 * idempotency key unique to this generation and stage.
 *
 * A publish that throws has an unknown outcome (the statement may have
 * committed and only the answer was lost), so it is retried with the SAME
 * key: the fence answers a byte-identical replay with the original revision,
 * never a second one. A `stale` answer means a newer generation owns the
 * scope: the run stops as if its lease had been lost and publishes nothing
 * more. When every attempt throws, the run fails and the candidates stay
 * inactive unless one of the attempts did commit.
 */
import type { ActivePublication, PublicationPointers } from "@openma/contract";
import { describeError, fail, ok, type RunContext, type Step } from "../context.ts";

export interface Published {
  publication: ActivePublication;
  replayed: boolean;
}

export function publish(ctx: RunContext, pointers: PublicationPointers, idempotencyKey: string): Promise<Step<Published>> {
  return ctx.guard("publish", async () => {
    for (let attempt = 1; ; attempt++) {
      let result: Awaited<ReturnType<typeof ctx.deps.fences.publish>>;
      try {
        result = await ctx.deps.fences.publish({ fence: ctx.fence, pointers, idempotencyKey, signal: ctx.signal });
      } catch (err) {
        // Interrupted runs do not retry; the guard reports the interruption.
        if (ctx.interruption("publish") || attempt >= ctx.timings.publishAttempts) {
          throw new Error(`publish ${idempotencyKey} failed after ${attempt} attempt(s), outcome unknown: ${describeError(err)}`);
        }
        ctx.trace.add("publish", "retried", `${idempotencyKey}: ${describeError(err)}`);
        await ctx.deps.scheduler.sleep(ctx.timings.publishRetryDelayMs, ctx.signal);
        continue;
      }
      if (result.type === "published") {
        ctx.active = result.publication;
        const replay = result.replayed ? " (replayed)" : "";
        ctx.trace.add("publish", "ok", `${idempotencyKey} -> revision ${result.publication.revision}${replay}`);
        return ok({ publication: result.publication, replayed: result.replayed });
      }
      if (result.type === "stale") {
        const reason = `publication refused: fence ${result.reason}`;
        ctx.loseLease(reason);
        ctx.trace.add("publish", "lease_lost", reason);
        return fail({ type: "lease_lost", stage: "publish", reason });
      }
      ctx.trace.add("publish", "failed", `${idempotencyKey}: ${result.reason}`);
      return fail({ type: "failed", stage: "publish", error: `idempotency key ${idempotencyKey} was already used for other pointers` });
    }
  });
}
