/**
 * Did the sandbox go away, or only the supervisor? Asked when the
 * supervisor ends (or cannot start) unexpectedly: the answer decides between
 * `sandbox_lost` (the host cold-restarts from the last publication) and
 * `failed`.
 *
 * Looks twice. A sandbox's teardown is not atomic with the death of the
 * processes in it: bubblewrap's pid-namespace init is still exiting when the
 * processes under it are already gone, and a container is removed some time
 * after its execs ended. So an `alive` right after the end is checked again
 * once `settleMs` passed; a probe that throws counts as "cannot tell".
 */
import type { FenceIdentity, ManagedSandboxLease, RuntimeResourceScope } from "@openma/contract";
import type { Scheduler } from "@openma/time";

export type SandboxProbe = (input: {
  scope: RuntimeResourceScope;
  fence: FenceIdentity;
  lease: ManagedSandboxLease;
}) => Promise<{ type: "alive" } | { type: "lost"; reason: string }>;

/** The loss reason, or `null` when the sandbox still looks alive (or the probe cannot tell). */
export async function sandboxLoss(
  probe: SandboxProbe,
  scheduler: Scheduler,
  settleMs: number,
  target: Parameters<SandboxProbe>[0],
): Promise<string | null> {
  for (const wait of [0, settleMs]) {
    if (wait > 0) await scheduler.sleep(wait);
    try {
      const beat = await probe(target);
      if (beat.type === "lost") return beat.reason;
    } catch {
      // cannot tell this time
    }
  }
  return null;
}
