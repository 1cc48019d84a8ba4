import { describe, expect, it } from "vitest";
import { workspaceDurabilityOf } from "./capabilities.ts";
import { unbuilt as unbuiltRow } from "./conformance/rows.ts";
import {
  admissionFor,
  claimsNothing,
  conformanceIssues,
  conformanceOf,
  DRIVER_CONFORMANCE,
  type DriverConformance,
} from "./conformance.ts";
import type { ManagedRuntimeProfile } from "./profile.ts";

const SEED_DRIVERS = [
  "node-docker",
  "litebox",
  "boxrun",
  "subprocess",
  "e2b",
  "daytona",
  "modal",
  "sprites",
  "vercel",
  "blaxel",
  "superserve",
  "cloudflare",
  "cloudflare-bridge",
];

const worker: ManagedRuntimeProfile["driver"] = { type: "ama_worker", process: { command: "ant-worker" } };

function profile(overrides: Partial<ManagedRuntimeProfile> = {}): ManagedRuntimeProfile {
  return {
    workspace: { requirement: "durable" },
    outputs: { requirement: "durable" },
    runtimeCheckpoint: "disabled",
    driver: worker,
    ...overrides,
  };
}

describe("the conformance table", () => {
  it("has one entry per upstream driver, plus bubblewrap, GKE dispatch, AWS activation, none and the warm pool", () => {
    const drivers = DRIVER_CONFORMANCE.map((entry) => entry.driver);
    expect(new Set(drivers).size).toBe(drivers.length);
    expect(drivers).toEqual(
      expect.arrayContaining([...SEED_DRIVERS, "bubblewrap", "gke-agent-sandbox", "aws-microvm", "none", "warm-pool"]),
    );
    expect(drivers).toHaveLength(SEED_DRIVERS.length + 5);
  });

  it("is internally consistent", () => {
    expect(conformanceIssues(DRIVER_CONFORMANCE)).toEqual([]);
  });

  it("claims nothing for a driver that is not built", () => {
    for (const entry of DRIVER_CONFORMANCE.filter((e) => !e.implemented)) {
      expect(entry.capabilities, entry.driver).toEqual(claimsNothing(entry.driver));
    }
  });

  it("keeps the upstream picture: of the cloud rows, credential egress is enforced only on cloudflare, which is built", () => {
    const enforced = DRIVER_CONFORMANCE.filter((e) => e.planned?.credentialEgress.enforcement === "enforced").map((e) => e.driver);
    expect(enforced).toEqual([]);
    expect(conformanceOf("cloudflare")?.capabilities.credentialEgress).toEqual({
      enforcement: "enforced",
      credentialMode: "live",
      interceptedProtocols: ["http", "https"],
    });
    const bestEffort = DRIVER_CONFORMANCE.filter((e) => e.planned && workspaceDurabilityOf(e.planned) === "best_effort").map(
      (e) => e.driver,
    );
    expect(bestEffort.sort()).toEqual([]);
    const amaOnly = DRIVER_CONFORMANCE.filter((e) => e.planned && e.planned.lanes.length === 1).map((e) => e.driver);
    // cloudflare-bridge, the one upstream ama_worker-only row, is built and says so in its own capabilities.
    expect(amaOnly).toEqual([]);
    expect(conformanceOf("cloudflare-bridge")?.capabilities.lanes).toEqual(["ama_worker"]);
  });

  it("describes bubblewrap as built: both lanes, no suspend, durable workspace, enforced egress", () => {
    const entry = conformanceOf("bubblewrap") as DriverConformance;
    expect(entry.implemented).toBe(true);
    expect(entry.capabilities.lanes).toEqual(["ama_worker", "openma_supervised"]);
    expect(entry.capabilities.sandbox.suspendResume).toBe("unsupported");
    expect(workspaceDurabilityOf(entry.capabilities)).toBe("durable");
    // openma serve composes the egress gateway: live credential substitution over HTTP and intercepted HTTPS.
    expect(entry.capabilities.credentialEgress).toEqual({
      enforcement: "enforced",
      credentialMode: "live",
      interceptedProtocols: ["http", "https"],
    });
    expect(entry.capabilities.sandboxPortFacts.has).toContain("credential_substitution");
  });

  it("describes node-docker's egress as the gateway openma serve composes, and when it is absent", () => {
    const entry = conformanceOf("node-docker") as DriverConformance;
    expect(entry.capabilities.credentialEgress).toEqual({
      enforcement: "enforced",
      credentialMode: "live",
      interceptedProtocols: ["http", "https"],
    });
    expect(entry.notes.join(" ")).toMatch(/non-root server \(or `OPENMA_EGRESS=off`\) warns and its containers have no network/);
  });

  it("describes the cloud drivers as built: both lanes, suspend/resume, a durable checkpointed workspace, no process checkpoint", () => {
    for (const driver of ["e2b", "daytona", "sprites"]) {
      const entry = conformanceOf(driver) as DriverConformance;
      expect(entry.implemented, driver).toBe(true);
      expect(entry.capabilities.lanes).toEqual(["ama_worker", "openma_supervised"]);
      expect(entry.capabilities.sandbox).toEqual({ suspendResume: "supported", hardTerminate: "supported", orphanReap: "host_managed" });
      expect(workspaceDurabilityOf(entry.capabilities)).toBe("durable");
      expect(entry.capabilities.workspace.map((w) => w.strategy)).not.toContain("retained_runtime");
      expect(entry.capabilities.outputs).toEqual([{ strategy: "final_collect", durability: "durable" }]);
      // A provider snapshot (E2B's pause keeps memory) is never advertised as an OpenMA process checkpoint.
      expect(entry.capabilities.runtimeCheckpoints).toEqual([]);
      expect(entry.capabilities.credentialEgress).toEqual({ enforcement: "unsupported" });
      const planned = admissionFor(driver, profile());
      expect(planned).toMatchObject({
        type: "planned",
        plan: { provider: driver, workspace: { strategy: "checkpoint_restore", durability: "durable" } },
      });
      expect(admissionFor(driver, profile({ runtimeCheckpoint: "required" })).type).toBe("rejected");
    }
    expect((conformanceOf("e2b") as DriverConformance).capabilities.sandboxPortFacts.has).toContain("provider_memory_snapshot");
  });

  it("flags a table that lies", () => {
    const bubblewrap = conformanceOf("bubblewrap") as DriverConformance;
    const lying: DriverConformance[] = [
      {
        ...unbuiltRow("aws-microvm", "vm", "an unbuilt row", null),
        capabilities: { ...claimsNothing("aws-microvm"), lanes: ["ama_worker"] },
      },
      { ...bubblewrap, capabilities: { ...bubblewrap.capabilities, provider: "docker" } },
      { ...bubblewrap, driver: "bubblewrap" },
    ];
    expect(conformanceIssues(lying)).toEqual([
      "aws-microvm: not implemented but its capabilities claim something",
      "bubblewrap: capabilities.provider is docker",
      "bubblewrap: duplicate entry",
    ]);
  });
});

describe("conformanceIssues, every rule", () => {
  it("flags planned/provider mismatches, contradictory facts and implemented/unimplemented inconsistencies", () => {
    const bubblewrap = conformanceOf("bubblewrap") as DriverConformance;
    const unbuilt = unbuiltRow("aws-microvm", "vm", "an unbuilt row", null);
    const caps = bubblewrap.capabilities;
    const table: DriverConformance[] = [
      { ...unbuilt, planned: { ...claimsNothing("modal") } },
      {
        ...bubblewrap,
        driver: "a",
        capabilities: { ...caps, provider: "a", sandboxPortFacts: { has: ["duplex_process"], lacks: ["duplex_process"] } },
      },
      { ...bubblewrap, driver: "b", capabilities: { ...caps, provider: "b" }, package: null },
      { ...bubblewrap, driver: "c", capabilities: { ...caps, provider: "c" }, planned: claimsNothing("c") },
      { ...unbuilt, driver: "d", capabilities: claimsNothing("d"), planned: null, package: "packages/drivers/d" },
      { ...unbuilt, driver: "f", capabilities: claimsNothing("f"), planned: null, package: null, toolSandbox: true },
    ];
    expect(conformanceIssues(table)).toEqual([
      "aws-microvm: planned.provider is modal",
      "a: facts both had and lacked: duplex_process",
      "b: implemented without a package",
      "c: implemented entries describe themselves in capabilities, not planned",
      "d: not implemented but names a package or a tool sandbox",
      "f: not implemented but names a package or a tool sandbox",
    ]);
  });
});

describe("admissionFor", () => {
  it("plans a durable profile on bubblewrap with the checkpoint workspace and uploaded outputs", () => {
    const result = admissionFor("bubblewrap", profile());
    expect(result).toMatchObject({
      type: "planned",
      plan: {
        provider: "bubblewrap",
        workspace: { requirement: "durable", strategy: "checkpoint_restore", durability: "durable" },
        outputs: { requirement: "durable", strategy: "watch_and_upload", durability: "durable" },
        runtimeCheckpoint: null,
      },
    });
  });

  it("rejects what bubblewrap cannot give, naming the guarantee", () => {
    // No retained runtime without suspend: a continuable profile that prefers one gets the next eligible strategy.
    const retained = admissionFor(
      "bubblewrap",
      profile({ workspace: { requirement: "continuable", preferredStrategies: ["retained_runtime"] } }),
    );
    expect(retained.type === "planned" && retained.plan.workspace).toEqual({
      requirement: "continuable",
      strategy: "durable_mount",
      durability: "best_effort",
    });
    // A durable profile never lands on durable_mount here: the table declares it best_effort.
    const durableMount = admissionFor(
      "bubblewrap",
      profile({ workspace: { requirement: "durable", preferredStrategies: ["durable_mount"] } }),
    );
    expect(durableMount.type === "planned" && durableMount.plan.workspace.strategy).toBe("checkpoint_restore");
    const checkpoint = admissionFor("bubblewrap", profile({ runtimeCheckpoint: "required" }));
    expect(checkpoint.type).toBe("rejected");
    expect(checkpoint.type === "rejected" && checkpoint.error.missing).toEqual([
      { guarantee: "runtime_checkpoint", requirement: "required", offered: [] },
    ]);
  });

  it("refuses unbuilt and unknown drivers as values, whatever the profile", () => {
    // Every seed driver is built now: an unbuilt row of the same shape stands in for the next one.
    const table = [...DRIVER_CONFORMANCE, unbuiltRow("next-driver", "vm", "an unbuilt row", null)];
    expect(admissionFor("next-driver", profile(), table)).toMatchObject({
      type: "unavailable",
      driver: "next-driver",
      reason: "not_implemented",
    });
    const unknown = admissionFor("nope", profile());
    expect(unknown).toMatchObject({ type: "unavailable", reason: "unknown_driver" });
    expect(unknown.type === "unavailable" && unknown.message).toContain("bubblewrap");
  });

  it("rejects every runtime profile for drivers that offer no lane (test subprocess, sandbox-free)", () => {
    for (const driver of ["subprocess", "none"]) {
      const result = admissionFor(driver, profile({ workspace: { requirement: "ephemeral" }, outputs: { requirement: "disabled" } }));
      expect(result.type, driver).toBe("rejected");
      expect(result.type === "rejected" && result.error.missing[0]?.guarantee).toBe("driver_lane");
    }
  });
});
