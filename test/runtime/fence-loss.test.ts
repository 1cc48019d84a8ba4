/**
 * Fence loss and failed kills on the real local drivers (bubblewrap and
 * node-docker, with the SQL fence and orphan store on both backends) and on
 * the cloud drivers (E2B, Daytona, Sprites against their stand-ins, on
 * SQLite), with the filesystem workspace and output adapters (the remote
 * ones for a cloud runtime). For a cloud driver "the engine" is the
 * stand-in: whether the remote sandbox still exists is asked there, never
 * through the driver.
 *
 * 1. Host A holds generation 1, publishes a turn, and sends a second turn's
 *    publication that is delayed on the wire. A is cut off from the database
 *    (its renewals throw), time passes the safety margin and A's lease
 *    controller gives up. The harness is told to stop; A's sandbox lives
 *    through the grace period and is hard-killed the moment it ends, while
 *    the publication is still on the wire (the host abandons it instead of
 *    waiting for an answer): A's run ends `lease_lost` and the engine
 *    confirms A's sandbox and process tree are gone. Once the fence has
 *    expired host B acquires generation 2, restores A's published turn and
 *    publishes; A's late publication then reaches the database and is
 *    refused as stale, and B's pointers stay active.
 * 2. The engine refuses a hard kill once: the host persists a token-free
 *    orphan record and reports the compute as orphaned (the sandbox really
 *    still runs); the orphan reaper, with a fresh driver instance that shares
 *    nothing with the host, kills it for real and resolves the record.
 *
 * Fails, never skips, when bubblewrap, dockerd, the sandbox images or
 * PostgreSQL are missing.
 */
import { join } from "node:path";
import type { OrphanReconcileReport } from "@openma/contract";
import { RuntimeReaper, type TurnCommitResult } from "@openma/host";
import { settle, steps } from "@openma/host/testing/rig";
import { FsBlobStore } from "@openma/storage/blobs";
import { BACKENDS, openTestStorage, type TestStorage } from "@openma/storage/testing";
import { ManualScheduler } from "@openma/time";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import {
  AMA_WORKER_PROFILE,
  CLOUD_DRIVERS,
  DRIVERS,
  HostFence,
  type LocalEngine,
  never,
  newScope,
  openEngine,
  processesHolding,
  processesMentioning,
  RefusingTerminate,
  type RuntimeParts,
  removeDir,
  runtimeHost,
  runtimeParts,
  SandboxHarness,
  scratchDir,
  TEST_TIMINGS,
} from "./support.ts";

const profile = AMA_WORKER_PROFILE;

/** Local drivers on both SQL backends; cloud drivers on SQLite (the fence is not what they put to the test). */
const MATRIX: [string, (typeof BACKENDS)[number]][] = [
  ...DRIVERS.flatMap((driver) => BACKENDS.map((dialect): [string, (typeof BACKENDS)[number]] => [driver, dialect])),
  ...CLOUD_DRIVERS.map((driver): [string, (typeof BACKENDS)[number]] => [driver, "sqlite"]),
];

describe.each(MATRIX)("the runtime host on the real %s driver", (driver, dialect) => {
  describe(`with the ${dialect} fence`, () => {
    let dir: string | undefined;
    let engine: LocalEngine | undefined;
    let storage: TestStorage | undefined;
    let scheduler: ManualScheduler;
    let parts: RuntimeParts;

    // Setup in beforeEach, not beforeAll: a missing engine must fail each test, not skip it.
    beforeEach(async () => {
      dir = engine = storage = undefined;
      dir = await scratchDir();
      engine = await openEngine(driver as Parameters<typeof openEngine>[0], dir);
      storage = await openTestStorage(dialect);
      scheduler = new ManualScheduler(Date.parse("2026-03-01T00:00:00.000Z"));
      parts = runtimeParts(storage, scheduler, new FsBlobStore(join(dir, "blobs")));
    });

    afterEach(async () => {
      await engine?.close();
      await storage?.cleanup();
      await removeDir(dir);
    });

    it("hard-kills a zombie's sandbox at grace expiry while its publication is on the wire, then refuses that publication", async () => {
      const scope = newScope();
      const fenceA = new HostFence(parts.sqlFence);
      const sandboxA = engine!.open();
      const turns: TurnCommitResult[] = [];
      const harnessA = new SandboxHarness(sandboxA, async (p) => {
        await p.startSleeper();
        await p.write("turn 1\n", "report 1\n");
        turns.push(await p.input.commitTurn("turn_1"));
        await p.write("turn 2, never published\n", "report 2\n");
        turns.push(await p.input.commitTurn("turn_2"));
        await p.aborted();
        return { type: "completed" };
      });
      const hostA = runtimeHost(parts, {
        name: "a",
        dir: dir!,
        sandbox: sandboxA,
        harness: harnessA,
        fence: fenceA,
        ports: engine!.ports?.(join(dir!, "a"), parts.store, scheduler, sandboxA),
      });
      const transit = fenceA.delayPublish((key) => key === "1:turn:turn_2:publish");
      let answered = false;
      void transit.answer.then(() => {
        answered = true;
      });
      const runA = hostA.run({ scope, profile });

      await transit.sent;
      expect(turns).toEqual([{ type: "committed", revision: 1, replayed: false }]);
      const heldA = fenceA.acquired[0]!;
      const placementA = harnessA.runs[0]!;
      const leaseA = placementA.input.sandbox;
      const marker = placementA.sleeper!.marker;
      expect(heldA.generation).toBe(1);

      // A loses its database: renewals throw, and only virtual time moves until its lease controller gives up.
      fenceA.cutOff();
      let lostA = false;
      placementA.input.signal.addEventListener("abort", () => {
        lostA = true;
      });
      while (!lostA) {
        if (scheduler.now() >= heldA.expiresAt) throw new Error("host A still believed in its fence at expiry");
        scheduler.advance(5_000);
        await settle();
      }
      expect(fenceA.renewalsFailed).toBeGreaterThan(0);
      expect(String(placementA.input.signal.reason)).toContain("could not renew before expiry");
      expect(scheduler.now()).toBeLessThan(heldA.expiresAt);

      // The cooperative part: until the grace period is over the sandbox lives, and the publication has no answer.
      scheduler.advance(TEST_TIMINGS.abortGraceMs - 1);
      await settle();
      expect(await engine!.state(scope, leaseA)).toBe("running");
      expect(await processesMentioning(marker)).not.toEqual([]);

      // The grace period ends: A stops waiting for its publication and kills the sandbox for real.
      scheduler.advance(1);
      const resultA = await runA;
      expect(answered).toBe(false);
      expect(turns[1]).toEqual({ type: "rejected", reason: "lease_lost" });
      expect(resultA).toMatchObject({ type: "lease_lost", generation: 1, cleanup: { compute: "terminated", orphanIds: [] } });
      expect(steps(resultA)).toEqual(
        expect.arrayContaining([
          "publish:lease_lost",
          "commit_turn:rejected",
          "run_harness:lease_lost",
          "terminate_compute:ok",
          "abort_outputs:ok",
          "release_fence:lost",
        ]),
      );
      expect(resultA.trace.find((t) => t.step === "publish" && t.status === "lease_lost")?.detail).toContain(
        `no answer within ${TEST_TIMINGS.abortGraceMs} ms of the abort`,
      );
      // Hard-killed, as the engine itself reports: no runtime, no process of its tree on the host.
      expect(await engine!.state(scope, leaseA)).toBe("gone");
      expect(await processesMentioning(marker)).toEqual([]);
      expect((await placementA.sleeper!.ended).type).not.toBe("timeout");

      // Host B: another process, its own driver instance, fence connection and owner id, once A's fence expired.
      scheduler.advance(Math.max(0, heldA.expiresAt + 1 - scheduler.now()));
      const sandboxB = engine!.open();
      let restored: string | null = null;
      const harnessB = new SandboxHarness(sandboxB, async (p) => {
        restored = await p.read("notes.md");
        await p.write("second owner\n", "report B\n");
        return { type: "completed" };
      });
      const fenceB = new HostFence(parts.sqlFence);
      const hostB = runtimeHost(parts, {
        name: "b",
        dir: dir!,
        sandbox: sandboxB,
        harness: harnessB,
        fence: fenceB,
        ports: engine!.ports?.(join(dir!, "b"), parts.store, scheduler, sandboxB),
      });
      const resultB = await hostB.run({ scope, profile });
      expect(resultB).toMatchObject({
        type: "completed",
        generation: 2,
        publication: { revision: 2, generation: 2 },
        cleanup: { compute: "terminated" },
      });
      expect(restored).toBe("turn 1\n");
      expect(fenceB.acquired[0]!.ownerId).not.toBe(heldA.ownerId);
      const activeB = await parts.sqlFence.active({ scope, signal: never });

      // A's publication finally reaches the database: refused, the fence alone keeps it out.
      transit.deliver();
      expect(await transit.answer).toEqual({ type: "stale", reason: "superseded" });

      // B's pointers stand; A's second turn never became a revision.
      expect(await parts.sqlFence.active({ scope, signal: never })).toEqual(activeB);
      expect(activeB).toMatchObject({ revision: 2, generation: 2 });
      const history = await parts.sqlFence.history({ scope, limit: 10, signal: never });
      expect(history.map((h) => [h.revision, h.generation, h.idempotencyKey])).toEqual([
        [2, 2, "2:final:publish"],
        [1, 1, "1:turn:turn_1:publish"],
      ]);
      expect(await engine!.state(scope, harnessB.runs[0]!.input.sandbox)).toBe("gone");
    });

    it("persists a token-free orphan when the hard kill fails, and the reaper kills the runtime for real", async () => {
      const scope = newScope();
      const fence = new HostFence(parts.sqlFence);
      const real = engine!.open();
      const harness = new SandboxHarness(real, async (p) => {
        await p.startSleeper();
        await p.write("done\n", "report\n");
        return { type: "completed" };
      });
      const host = runtimeHost(parts, {
        name: "a",
        dir: dir!,
        sandbox: new RefusingTerminate(real),
        harness,
        fence,
        ports: engine!.ports?.(join(dir!, "a"), parts.store, scheduler, real),
      });
      const result = await host.run({ scope, profile });
      expect(result).toMatchObject({ type: "completed", generation: 1, publication: { revision: 1 }, cleanup: { compute: "orphaned" } });
      expect(steps(result)).toEqual(expect.arrayContaining(["terminate_compute:failed", "enqueue_orphan:ok", "release_fence:ok"]));
      const placement = harness.runs[0]!;
      const lease = placement.input.sandbox;
      const marker = placement.sleeper!.marker;

      // The kill really did not happen: the runtime and its process tree are still there, and hold no fence token.
      const token = fence.acquired[0]!.token;
      expect(await engine!.state(scope, lease)).toBe("running");
      expect(await processesMentioning(marker)).not.toEqual([]);
      expect(await processesHolding(token)).toEqual([]);

      const orphanId = result.type === "completed" ? result.cleanup.orphanIds[0]! : "";
      const record = await parts.orphans.get({ id: orphanId, signal: never });
      expect(record).toMatchObject({ scope, generation: 1, lease, reason: "terminate_failed", state: "pending", attempts: 0 });
      expect(record!.lastError).toContain("device or resource busy");
      const row = await storage!.storage.db.selectFrom("runtime_orphans").selectAll().where("id", "=", orphanId).executeTakeFirstOrThrow();
      expect(JSON.stringify(row)).not.toContain(token);
      expect(JSON.stringify(result.trace)).not.toContain(token);

      // The reaper runs in "another process": a fresh driver instance working from the serialized lease alone.
      let report!: (value: OrphanReconcileReport) => void;
      const reported = new Promise<OrphanReconcileReport>((resolve) => {
        report = resolve;
      });
      const errors: unknown[] = [];
      const reaper = new RuntimeReaper({
        orphans: parts.orphans,
        reaper: engine!.open(),
        scheduler,
        intervalMs: 45_000,
        onReport: report,
        onError: (err) => errors.push(err),
      });
      reaper.start();
      expect(scheduler.pending).toEqual([45_000]);
      scheduler.advance(45_000);
      expect(await reported).toEqual({ due: 1, reaped: 1, retried: 0, deadLettered: 0, skipped: 0 });
      await reaper.stop();
      expect(errors).toEqual([]);

      expect(await engine!.state(scope, lease)).toBe("gone");
      expect(await processesMentioning(marker)).toEqual([]);
      expect((await placement.sleeper!.ended).type).not.toBe("timeout");
      expect(await parts.orphans.get({ id: orphanId, signal: never })).toMatchObject({
        state: "reaped",
        attempts: 1,
        resolvedAt: scheduler.now(),
      });
    });
  });
});
