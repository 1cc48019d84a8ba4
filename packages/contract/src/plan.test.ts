import { describe, expect, it } from "vitest";
import type { ManagedRuntimeCapabilities, WorkspaceStrategyOffer } from "./capabilities.ts";
import { effectiveWorkspaceDurability, workspaceDurabilityOf } from "./capabilities.ts";
import { composeCapabilities } from "./compose.ts";
import { HARNESS_SUPERVISOR_PROTOCOL, type HarnessDriver } from "./driver.ts";
import { describeMissing, type MissingGuarantee, resolveManagedRuntimePlan } from "./plan.ts";
import type { ManagedRuntimeProfile } from "./profile.ts";
import { MAX_DRIVER_TIMEOUT_MS, profileIssues } from "./profile-check.ts";

const amaWorker: HarnessDriver = { type: "ama_worker", process: { command: "ant-worker" } };
const supervised: HarnessDriver = {
  type: "openma_supervised",
  protocol: HARNESS_SUPERVISOR_PROTOCOL,
  supervisor: { command: "openma-supervisor" },
  harness: { id: "pi", version: "1.2.3" },
  readyTimeoutMs: 30_000,
  heartbeatTimeoutMs: 15_000,
  drainTimeoutMs: 60_000,
};

/** Shapes of the shipped presets in the conformance table. */
const nodeDocker: ManagedRuntimeCapabilities = {
  provider: "node-docker",
  lanes: ["ama_worker", "openma_supervised"],
  sandbox: { suspendResume: "unsupported", hardTerminate: "supported", orphanReap: "host_managed" },
  workspace: [
    { strategy: "checkpoint_restore", durability: "durable" },
    { strategy: "ephemeral", durability: "none" },
  ],
  outputs: [{ strategy: "final_collect", durability: "durable" }],
  runtimeCheckpoints: [],
  credentialEgress: { enforcement: "unsupported" },
  sandboxPortFacts: { has: ["duplex_process", "workspace_file_io"], lacks: ["provider_suspend_resume"] },
};
const litebox: ManagedRuntimeCapabilities = {
  ...nodeDocker,
  provider: "litebox",
  sandbox: { suspendResume: "supported", hardTerminate: "supported", orphanReap: "host_managed" },
  workspace: [
    { strategy: "retained_runtime", durability: "best_effort" },
    { strategy: "checkpoint_restore", durability: "best_effort" },
  ],
  outputs: [{ strategy: "final_collect", durability: "best_effort" }],
};

function profile(overrides: Partial<ManagedRuntimeProfile> = {}): ManagedRuntimeProfile {
  return {
    workspace: { requirement: "durable" },
    outputs: { requirement: "durable" },
    runtimeCheckpoint: "disabled",
    driver: amaWorker,
    ...overrides,
  };
}

function planned(p: ManagedRuntimeProfile, caps: ManagedRuntimeCapabilities) {
  const result = resolveManagedRuntimePlan(p, caps);
  if (result.type !== "planned") throw new Error(result.error.message);
  return result.plan;
}

function missing(p: ManagedRuntimeProfile, caps: ManagedRuntimeCapabilities): MissingGuarantee[] {
  const result = resolveManagedRuntimePlan(p, caps);
  if (result.type !== "rejected") throw new Error("expected rejection");
  return result.error.missing;
}

describe("resolveManagedRuntimePlan: workspace", () => {
  it("plans a durable coding workspace on Node + Docker with checkpoint_restore", () => {
    expect(planned(profile({ driver: supervised }), nodeDocker)).toEqual({
      provider: "node-docker",
      driver: supervised,
      workspace: { requirement: "durable", strategy: "checkpoint_restore", durability: "durable" },
      outputs: { requirement: "durable", strategy: "final_collect", durability: "durable" },
      runtimeCheckpoint: null,
    });
  });

  it("never downgrades durable: host-local snapshots and retained boxes fail admission", () => {
    const result = resolveManagedRuntimePlan(profile({ outputs: { requirement: "disabled" } }), litebox);
    expect(result).toMatchObject({
      type: "rejected",
      error: { type: "admission_error", provider: "litebox", missing: [{ guarantee: "workspace_durability", requirement: "durable" }] },
    });
    expect(result.type === "rejected" && result.error.message).toBe(
      'runtime profile cannot run on provider "litebox": no workspace strategy is durable (offered: retained_runtime/best_effort, checkpoint_restore/best_effort)',
    );
  });

  it("does not treat a retained runtime or an ephemeral workspace as durable, whatever the provider declares", () => {
    const boastful = {
      ...litebox,
      workspace: [
        { strategy: "retained_runtime", durability: "durable" },
        { strategy: "ephemeral", durability: "durable" },
      ],
    };
    expect(missing(profile({ outputs: { requirement: "disabled" } }), boastful as ManagedRuntimeCapabilities)).toEqual([
      { guarantee: "workspace_durability", requirement: "durable", offered: boastful.workspace },
    ]);
  });

  it("accepts best-effort strategies for a continuable workspace, strongest first", () => {
    expect(
      planned(profile({ workspace: { requirement: "continuable" }, outputs: { requirement: "best_effort" } }), litebox).workspace,
    ).toEqual({
      requirement: "continuable",
      strategy: "checkpoint_restore",
      durability: "best_effort",
    });
    const retainedOnly = {
      ...litebox,
      workspace: [{ strategy: "retained_runtime", durability: "best_effort" }] as WorkspaceStrategyOffer[],
    };
    expect(
      planned(profile({ workspace: { requirement: "continuable" }, outputs: { requirement: "disabled" } }), retainedOnly).workspace
        .strategy,
    ).toBe("retained_runtime");
    // Without suspend/resume a provider cannot retain anything.
    const noSuspend = { ...retainedOnly, sandbox: nodeDocker.sandbox };
    expect(missing(profile({ workspace: { requirement: "continuable" }, outputs: { requirement: "disabled" } }), noSuspend)).toMatchObject([
      { guarantee: "workspace_durability", requirement: "continuable" },
    ]);
  });

  it("chooses ephemeral only when it is explicitly requested, and upgrades rather than fails", () => {
    const base = profile({ outputs: { requirement: "disabled" } });
    expect(planned(base, nodeDocker).workspace.strategy).toBe("checkpoint_restore");
    expect(planned({ ...base, workspace: { requirement: "ephemeral" } }, nodeDocker).workspace).toEqual({
      requirement: "ephemeral",
      strategy: "ephemeral",
      durability: "none",
    });
    expect(planned({ ...base, workspace: { requirement: "ephemeral" } }, litebox).workspace.strategy).toBe("checkpoint_restore");
    expect(missing({ ...base, workspace: { requirement: "ephemeral" } }, { ...nodeDocker, workspace: [] })).toEqual([
      { guarantee: "workspace_durability", requirement: "ephemeral", offered: [] },
    ]);
  });

  it("honours preferred strategies in order, then falls back to the default order", () => {
    const both = {
      ...nodeDocker,
      workspace: [
        { strategy: "durable_mount", durability: "durable" },
        { strategy: "checkpoint_restore", durability: "durable" },
      ] as WorkspaceStrategyOffer[],
    };
    const base = profile({ outputs: { requirement: "disabled" } });
    expect(planned(base, both).workspace.strategy).toBe("durable_mount");
    expect(
      planned({ ...base, workspace: { requirement: "durable", preferredStrategies: ["checkpoint_restore", "durable_mount"] } }, both)
        .workspace.strategy,
    ).toBe("checkpoint_restore");
    expect(
      planned({ ...base, workspace: { requirement: "durable", preferredStrategies: ["durable_mount", "durable_mount"] } }, nodeDocker)
        .workspace.strategy,
    ).toBe("checkpoint_restore");
  });

  it("rejects a preference the requirement rules out instead of skipping it", () => {
    expect(
      missing(
        profile({ workspace: { requirement: "durable", preferredStrategies: ["retained_runtime", "checkpoint_restore"] } }),
        nodeDocker,
      ),
    ).toEqual([{ guarantee: "workspace_preference", strategy: "retained_runtime", requirement: "durable" }]);
    expect(missing(profile({ workspace: { requirement: "continuable", preferredStrategies: ["ephemeral"] } }), nodeDocker)).toEqual([
      { guarantee: "workspace_preference", strategy: "ephemeral", requirement: "continuable" },
    ]);
  });
});

describe("resolveManagedRuntimePlan: outputs, checkpoints, lanes", () => {
  it("skips outputs when disabled and requires a durable offer for durable outputs", () => {
    expect(
      planned(profile({ outputs: { requirement: "disabled", preferredStrategies: ["final_collect"] } }), nodeDocker).outputs,
    ).toBeNull();
    expect(missing(profile({ workspace: { requirement: "continuable" } }), litebox)).toEqual([
      { guarantee: "output_durability", requirement: "durable", offered: litebox.outputs },
    ]);
    expect(missing(profile(), { ...nodeDocker, outputs: [] })).toEqual([
      { guarantee: "output_durability", requirement: "durable", offered: [] },
    ]);
  });

  it("prefers the durable offer of a strategy and honours output preferences", () => {
    const caps: ManagedRuntimeCapabilities = {
      ...nodeDocker,
      outputs: [
        { strategy: "final_collect", durability: "best_effort" },
        { strategy: "final_collect", durability: "durable" },
        { strategy: "watch_and_upload", durability: "best_effort" },
        { strategy: "durable_mount", durability: "durable" },
      ],
    };
    expect(planned(profile(), caps).outputs).toEqual({ requirement: "durable", strategy: "durable_mount", durability: "durable" });
    expect(planned(profile({ outputs: { requirement: "best_effort", preferredStrategies: ["watch_and_upload"] } }), caps).outputs).toEqual({
      requirement: "best_effort",
      strategy: "watch_and_upload",
      durability: "best_effort",
    });
    expect(
      planned(profile({ outputs: { requirement: "durable", preferredStrategies: ["watch_and_upload", "final_collect"] } }), caps).outputs,
    ).toEqual({
      requirement: "durable",
      strategy: "final_collect",
      durability: "durable",
    });
    // Offer order does not matter: a weaker duplicate listed after a stronger one never replaces it.
    const reversed = { ...caps, outputs: [...caps.outputs].reverse() };
    expect(
      planned(profile({ outputs: { requirement: "durable", preferredStrategies: ["final_collect"] } }), reversed).outputs?.durability,
    ).toBe("durable");
  });

  it("fails closed when a runtime checkpoint is required but no RuntimeCheckpointPort is wired", () => {
    expect(missing(profile({ runtimeCheckpoint: "required" }), nodeDocker)).toEqual([
      { guarantee: "runtime_checkpoint", requirement: "required", offered: [] },
    ]);
    expect(planned(profile({ runtimeCheckpoint: "optional" }), nodeDocker).runtimeCheckpoint).toBeNull();
    expect(
      planned(profile({ runtimeCheckpoint: "disabled" }), { ...nodeDocker, runtimeCheckpoints: ["process"] }).runtimeCheckpoint,
    ).toBeNull();
  });

  it("prefers process checkpoints over filesystem ones", () => {
    expect(
      planned(profile({ runtimeCheckpoint: "required" }), { ...nodeDocker, runtimeCheckpoints: ["filesystem"] }).runtimeCheckpoint,
    ).toEqual({
      requirement: "required",
      kind: "filesystem",
    });
    expect(
      planned(profile({ runtimeCheckpoint: "optional" }), { ...nodeDocker, runtimeCheckpoints: ["filesystem", "process"] })
        .runtimeCheckpoint,
    ).toEqual({
      requirement: "optional",
      kind: "process",
    });
  });

  it("rejects a driver lane the composition does not offer", () => {
    expect(missing(profile({ driver: supervised }), { ...nodeDocker, lanes: ["ama_worker"] })).toEqual([
      { guarantee: "driver_lane", requested: "openma_supervised", offered: ["ama_worker"] },
    ]);
  });

  it("names every missing guarantee at once", () => {
    const result = resolveManagedRuntimePlan(profile({ driver: supervised, runtimeCheckpoint: "required" }), { ...litebox, lanes: [] });
    expect(result.type === "rejected" && result.error.missing.map((m) => m.guarantee)).toEqual([
      "driver_lane",
      "workspace_durability",
      "output_durability",
      "runtime_checkpoint",
    ]);
    expect(result.type === "rejected" && result.error.message).toBe(
      'runtime profile cannot run on provider "litebox": driver lane openma_supervised is not offered (offered: none); ' +
        "no workspace strategy is durable (offered: retained_runtime/best_effort, checkpoint_restore/best_effort); " +
        "no durable output strategy (offered: final_collect/best_effort); " +
        "a runtime checkpoint is required but the composition has no RuntimeCheckpointPort",
    );
  });

  it("describes preference and profile problems", () => {
    expect(describeMissing({ guarantee: "workspace_preference", strategy: "ephemeral", requirement: "durable" })).toBe(
      "preferred workspace strategy ephemeral cannot satisfy a durable workspace",
    );
    expect(describeMissing({ guarantee: "invalid_profile", field: "driver.type", problem: "must be x" })).toBe("driver.type must be x");
  });

  it("rejects a malformed profile before looking at capabilities", () => {
    const bogus = { ...profile(), workspace: { requirement: "durabel" } } as unknown as ManagedRuntimeProfile;
    expect(resolveManagedRuntimePlan(bogus, nodeDocker)).toMatchObject({
      type: "rejected",
      error: {
        missing: [{ guarantee: "invalid_profile", field: "workspace.requirement" }],
        message: expect.stringContaining("workspace.requirement"),
      },
    });
  });
});

describe("profileIssues", () => {
  const fields = (value: unknown) => profileIssues(value).map((i) => i.field);

  it("accepts well-formed profiles of both lanes", () => {
    expect(profileIssues(profile())).toEqual([]);
    expect(
      profileIssues(
        profile({
          driver: { type: "ama_worker", process: { command: "w", args: ["--x"], cwd: "/srv" } },
          workspace: { requirement: "continuable", preferredStrategies: ["retained_runtime"] },
          outputs: { requirement: "best_effort", preferredStrategies: ["final_collect"] },
        }),
      ),
    ).toEqual([]);
    expect(profileIssues(profile({ driver: supervised, runtimeCheckpoint: "optional" }))).toEqual([]);
  });

  it("names each malformed field", () => {
    expect(fields(null)).toEqual(["profile"]);
    expect(fields([])).toEqual(["profile"]);
    expect(fields({})).toEqual(["workspace.requirement", "outputs.requirement", "runtimeCheckpoint", "driver.type"]);
    expect(
      fields({
        ...profile(),
        workspace: { requirement: "durable", preferredStrategies: "durable_mount" },
        outputs: { requirement: "durable", preferredStrategies: ["final_collect", "ftp"] },
        runtimeCheckpoint: "sometimes",
      }),
    ).toEqual(["workspace.preferredStrategies", "outputs.preferredStrategies[1]", "runtimeCheckpoint"]);
  });

  it("checks process declarations", () => {
    expect(fields(profile({ driver: { type: "ama_worker", process: { command: "" } } }))).toEqual(["driver.process.command"]);
    expect(fields(profile({ driver: { type: "ama_worker" } as unknown as HarnessDriver }))).toEqual(["driver.process.command"]);
    expect(
      fields(profile({ driver: { type: "ama_worker", process: { command: "w", args: [1], cwd: "" } } as unknown as HarnessDriver })),
    ).toEqual(["driver.process.args", "driver.process.cwd"]);
    expect(fields(profile({ driver: { type: "ama_worker", process: { command: "w", args: "x" } } as unknown as HarnessDriver }))).toEqual([
      "driver.process.args",
    ]);
    expect(fields(profile({ driver: { type: "ama_worker", process: { command: "w", cwd: 7 } } as unknown as HarnessDriver }))).toEqual([
      "driver.process.cwd",
    ]);
  });

  it("checks the supervised driver's protocol, harness and timeouts", () => {
    const bad = {
      ...supervised,
      protocol: "v0",
      harness: { id: "", version: "x".repeat(300) },
      readyTimeoutMs: 0,
      heartbeatTimeoutMs: 1.5,
      drainTimeoutMs: MAX_DRIVER_TIMEOUT_MS + 1,
    } as unknown as HarnessDriver;
    expect(fields(profile({ driver: bad }))).toEqual([
      "driver.protocol",
      "driver.harness.id",
      "driver.harness.version",
      "driver.readyTimeoutMs",
      "driver.heartbeatTimeoutMs",
      "driver.drainTimeoutMs",
    ]);
    const noHarness = { ...supervised, harness: undefined, drainTimeoutMs: MAX_DRIVER_TIMEOUT_MS } as unknown as HarnessDriver;
    expect(fields(profile({ driver: noHarness }))).toEqual(["driver.harness.id", "driver.harness.version"]);
  });
});

describe("capability helpers", () => {
  const supported = litebox.sandbox;
  const unsupported = nodeDocker.sandbox;

  it("caps declared durability by what each strategy can physically keep", () => {
    expect(effectiveWorkspaceDurability({ strategy: "checkpoint_restore", durability: "durable" }, unsupported)).toBe("durable");
    expect(effectiveWorkspaceDurability({ strategy: "durable_mount", durability: "best_effort" }, unsupported)).toBe("best_effort");
    expect(effectiveWorkspaceDurability({ strategy: "ephemeral", durability: "durable" }, supported)).toBe("none");
    expect(effectiveWorkspaceDurability({ strategy: "retained_runtime", durability: "durable" }, supported)).toBe("best_effort");
    expect(effectiveWorkspaceDurability({ strategy: "retained_runtime", durability: "none" }, supported)).toBe("none");
    expect(effectiveWorkspaceDurability({ strategy: "retained_runtime", durability: "best_effort" }, unsupported)).toBe("none");
  });

  it("reports the conformance-table workspace column", () => {
    expect(workspaceDurabilityOf(nodeDocker)).toBe("durable");
    expect(workspaceDurabilityOf(litebox)).toBe("best_effort");
    expect(workspaceDurabilityOf({ ...nodeDocker, workspace: [{ strategy: "ephemeral", durability: "none" }] })).toBe("none");
    expect(workspaceDurabilityOf({ ...nodeDocker, workspace: [] })).toBe("none");
  });

  it("composes port declarations; only a wired RuntimeCheckpointPort advertises checkpoints", () => {
    const sandbox = {
      capabilities: {
        provider: "node-docker",
        lifecycle: nodeDocker.sandbox,
        facts: nodeDocker.sandboxPortFacts,
        credentialEgress: nodeDocker.credentialEgress,
      },
    };
    const workspace = { capabilities: nodeDocker.workspace };
    expect(composeCapabilities({ sandbox, workspace, outputs: { capabilities: nodeDocker.outputs }, lanes: nodeDocker.lanes })).toEqual(
      nodeDocker,
    );
    const bare = composeCapabilities({ sandbox, workspace, lanes: ["ama_worker"], runtimeCheckpoint: { kinds: ["process"] } });
    expect(bare.outputs).toEqual([]);
    expect(bare.runtimeCheckpoints).toEqual(["process"]);
  });
});
