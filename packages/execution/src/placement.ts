/**
 * One scheduling authority per placement (seed 004): a session's brain turns
 * are scheduled either by the session execution queue (the harness runs in
 * this server) or by the environment's Work queue (the harness runs inside
 * the self-hosted sandbox that holds the Work item), never by both.
 *
 * `self_hosted` environments default to `server`: the official
 * EnvironmentWorker (the `ama_worker` lane) is only the session's hands, so
 * its brain runs here on the execution queue while the Work queue schedules
 * the hands. `work_item` is for deployments whose harness runs inside the
 * self-hosted sandbox (`openma_supervised`), where the one Work claim owns
 * the whole attempt and this server must not also run turns.
 */
export type SelfHostedBrain = "work_item" | "server";

export const SELF_HOSTED_BRAIN_VALUES: readonly SelfHostedBrain[] = ["work_item", "server"];

/** True when this session's turns are scheduled by the execution queue. */
export function brainRunsOnServer(environmentType: string | undefined, selfHostedBrain: SelfHostedBrain = "server"): boolean {
  return environmentType !== "self_hosted" || selfHostedBrain === "server";
}

/** User event types that ask the brain for a turn (they also wake a running turn's watcher when they stop it). */
export const TURN_BEARING_TYPES: ReadonlySet<string> = new Set([
  "user.message",
  "user.interrupt",
  "user.define_outcome",
  "user.tool_confirmation",
  "user.tool_result",
  "user.custom_tool_result",
]);
