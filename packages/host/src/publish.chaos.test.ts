/**
 * Chaos lane, inside the publish: a Kysely plugin fails the Nth SQL statement
 * of the real fence's publish (before it reaches the database, or after it
 * ran inside the transaction), and a wrapper drops the answer of a publish
 * that did commit. For every await the outcome is the same: the host retries
 * with the same idempotency key and exactly one revision lands; a publish
 * refused as stale (a newer generation took over) lands nothing more.
 */
import type { ActivePublication, PublicationRecord, RuntimeResourceFencePort } from "@openma/contract";
import { SqlRuntimeResourceFence } from "@openma/storage/fence";
import { BACKENDS, openTestStorage, type TestStorage } from "@openma/storage/testing";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type StatementFault, StatementFaults } from "./testing/fence.ts";
import { drive, openRig, type Rig, steps, TEST_TIMINGS } from "./testing/rig.ts";

const signal = new AbortController().signal;
const COLLECTED = [
  "plan:ok",
  "acquire_fence:ok",
  "materialize_workspace:ok",
  "prepare_outputs:ok",
  "acquire_compute:ok",
  "attach:ok",
  "run_harness:ok",
  "drain:ok",
  "checkpoint_workspace:ok",
  "collect_outputs:ok",
  "finalize_outputs:ok",
];
const DONE = ["terminate_compute:ok", "release_outputs:ok", "release_workspace:ok", "release_fence:ok"];
const FAILED = ["terminate_compute:ok", "abort_outputs:ok", "release_workspace:ok", "release_fence:ok"];
const UPDATE = "UpdateQueryNode";
const INSERT = "InsertQueryNode";
const SELECT = "SelectQueryNode";

interface Row {
  name: string;
  fault?: StatementFault;
  /** Drop the answer of these publish calls (1-based) after they committed. */
  loseAnswer?: number[];
  /** A newer generation takes over while the host waits to retry. */
  takeover?: boolean;
  result: string;
  trace: string[];
  /** Statement kinds per publish call. */
  windows: string[][];
  /** How many history rows the host's final key has. */
  published: 0 | 1;
}

const ROWS: Row[] = [
  {
    name: "fails before the compare-and-set UPDATE",
    fault: { at: "before", statement: 1 },
    result: "completed",
    trace: [...COLLECTED, "publish:retried", "publish:ok", ...DONE],
    windows: [[UPDATE], [UPDATE, INSERT]],
    published: 1,
  },
  {
    name: "fails after the UPDATE ran (rolled back)",
    fault: { at: "after", statement: 1 },
    result: "completed",
    trace: [...COLLECTED, "publish:retried", "publish:ok", ...DONE],
    windows: [[UPDATE], [UPDATE, INSERT]],
    published: 1,
  },
  {
    name: "fails before the history INSERT",
    fault: { at: "before", statement: 2 },
    result: "completed",
    trace: [...COLLECTED, "publish:retried", "publish:ok", ...DONE],
    windows: [
      [UPDATE, INSERT],
      [UPDATE, INSERT],
    ],
    published: 1,
  },
  {
    name: "fails after the history INSERT ran (rolled back)",
    fault: { at: "after", statement: 2 },
    result: "completed",
    trace: [...COLLECTED, "publish:retried", "publish:ok", ...DONE],
    windows: [
      [UPDATE, INSERT],
      [UPDATE, INSERT],
    ],
    published: 1,
  },
  {
    name: "commits but the answer is lost: the retry is a replay",
    loseAnswer: [1],
    result: "completed",
    trace: [...COLLECTED, "publish:retried", "publish:ok", ...DONE],
    windows: [
      [UPDATE, INSERT],
      [UPDATE, SELECT],
    ],
    published: 1,
  },
  {
    name: "answer lost, then the replay's explaining SELECT fails, then the replay succeeds",
    loseAnswer: [1],
    fault: { at: "before", statement: 2, windows: [2] },
    result: "completed",
    trace: [...COLLECTED, "publish:retried", "publish:retried", "publish:ok", ...DONE],
    windows: [
      [UPDATE, INSERT],
      [UPDATE, SELECT],
      [UPDATE, SELECT],
    ],
    published: 1,
  },
  {
    name: "fails before the UPDATE on every attempt: outcome reported unknown, nothing published",
    fault: { at: "before", statement: 1, windows: [1, 2, 3] },
    result: "failed",
    trace: [...COLLECTED, "publish:retried", "publish:retried", "publish:failed", ...FAILED],
    windows: [[UPDATE], [UPDATE], [UPDATE]],
    published: 0,
  },
  {
    name: "answer lost and a newer generation took over: the retry is rejected as stale",
    loseAnswer: [1],
    takeover: true,
    result: "lease_lost",
    trace: [...COLLECTED, "publish:retried", "publish:lease_lost", ...FAILED],
    windows: [
      [UPDATE, INSERT],
      [UPDATE, SELECT],
    ],
    published: 1,
  },
];

describe.each(BACKENDS)("publish faults on the real %s fence", (dialect) => {
  let storage: TestStorage;
  beforeAll(async () => {
    storage = await openTestStorage(dialect);
  });
  afterAll(async () => storage?.cleanup());

  /** The host's fence: every publish call is a counted window, and chosen answers are dropped after commit. */
  function faultyFence(rig: Rig, plugin: StatementFaults, row: Row): RuntimeResourceFencePort {
    const sql = new SqlRuntimeResourceFence(storage.storage.db.withPlugin(plugin), { clock: rig.scheduler });
    let calls = 0;
    return {
      acquire: (i) => sql.acquire(i),
      renew: (i) => sql.renew(i),
      isCurrent: (i) => sql.isCurrent(i),
      release: (i) => sql.release(i),
      active: (i) => sql.active(i),
      history: (i) => sql.history(i),
      publish: async (i) => {
        calls += 1;
        const result = await plugin.during(() => sql.publish(i));
        if (row.loseAnswer?.includes(calls)) {
          if (row.takeover) await takeOver(rig);
          throw new Error("connection reset after commit");
        }
        return result;
      },
    };
  }

  /** A newer owner whose clock is far ahead finds the fence expired, takes it and publishes. */
  async function takeOver(rig: Rig): Promise<void> {
    const later = new SqlRuntimeResourceFence(storage.storage.db, {
      clock: { now: () => rig.scheduler.now() + 10 * TEST_TIMINGS.leaseTtlMs },
    });
    const acquired = await later.acquire({ scope: rig.scope, ownerId: "usurper#1", ttlMs: TEST_TIMINGS.leaseTtlMs, signal });
    if (acquired.type !== "acquired") throw new Error("takeover failed");
    const pointers = { workspace: { id: "ws_usurper", contentHash: `sha256:${"e".repeat(64)}` } };
    await later.publish({ fence: acquired.fence, pointers, idempotencyKey: `${acquired.fence.generation}:final:publish`, signal });
  }

  it.each(ROWS)("$name", async (row) => {
    const rig = openRig(storage);
    const plugin = new StatementFaults();
    if (row.fault) plugin.arm(row.fault);
    rig.harness.script(async (input) => {
      rig.workspace.files(input.workspace.bindingId)["a.txt"] = "x";
      rig.outputs.files(input.outputs!.bindingId)["o.txt"] = "y";
      return { type: "completed" };
    });
    const result = await drive(rig.scheduler, rig.run(undefined, { fences: faultyFence(rig, plugin, row) }), [
      TEST_TIMINGS.publishRetryDelayMs,
    ]);

    expect(result.type).toBe(row.result);
    expect(steps(result)).toEqual(row.trace);
    expect(plugin.windows).toEqual(row.windows);
    const history: PublicationRecord[] = await rig.sqlFence.history({ scope: rig.scope, limit: 10, signal });
    const ours = history.filter((h) => h.idempotencyKey === "1:final:publish");
    expect(ours).toHaveLength(row.published);
    const active: ActivePublication | null = await rig.sqlFence.active({ scope: rig.scope, signal });
    if (row.takeover) {
      // The newer generation's pointers stand; the stale owner's retry changed nothing.
      expect(active).toMatchObject({ generation: 2, revision: 2, workspace: { id: "ws_usurper" } });
    } else if (row.published) {
      expect(active).toMatchObject({ generation: 1, revision: 1 });
    } else {
      expect(active).toBeNull();
    }
  });
});
