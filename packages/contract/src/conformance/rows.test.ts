import { describe, expect, it } from "vitest";
import { planned } from "./rows.ts";

const SPEC = {
  lanes: ["ama_worker"],
  workspace: [],
  outputs: [],
  credentialEgress: { enforcement: "unsupported" },
  sandboxPortFacts: { has: [], lacks: [] },
} as const;

describe("planned", () => {
  it("describes a driver's suspend and resume as the seed's table says, host-managed otherwise", () => {
    expect(planned("x", { ...SPEC, suspend: true }).sandbox).toEqual({
      suspendResume: "supported",
      hardTerminate: "supported",
      orphanReap: "host_managed",
    });
    expect(planned("x", { ...SPEC, suspend: false })).toMatchObject({
      provider: "x",
      lanes: ["ama_worker"],
      sandbox: { suspendResume: "unsupported" },
      runtimeCheckpoints: [],
    });
  });
});
