import { describe, expect, it } from "vitest";
import * as contract from "./index.ts";
import {
  DEFAULT_ORPHAN_RETRY_POLICY,
  MAX_ORPHAN_ERROR_LENGTH,
  orphanRetryDelayMs,
  orphanRetryPolicyIssues,
  redactSecrets,
} from "./orphan.ts";

const policy = { baseDelayMs: 1_000, maxDelayMs: 60_000, maxAttempts: 8, claimTtlMs: 30_000 };

describe("orphan retry policy", () => {
  it("doubles the delay per failure up to the cap", () => {
    expect([1, 2, 3, 4, 5, 6, 7, 8].map((n) => orphanRetryDelayMs(n, policy))).toEqual([
      1_000, 2_000, 4_000, 8_000, 16_000, 32_000, 60_000, 60_000,
    ]);
    // Out-of-range counts stay finite and bounded.
    expect(orphanRetryDelayMs(0, policy)).toBe(1_000);
    expect(orphanRetryDelayMs(10_000, policy)).toBe(60_000);
  });

  it("validates policies", () => {
    expect(orphanRetryPolicyIssues(DEFAULT_ORPHAN_RETRY_POLICY)).toEqual([]);
    expect(orphanRetryPolicyIssues({ baseDelayMs: 0, maxDelayMs: 0.5, maxAttempts: 1001, claimTtlMs: -1 })).toEqual([
      "baseDelayMs: must be an integer between 1 and 86400000",
      "maxDelayMs: must be an integer between baseDelayMs and 604800000",
      "maxAttempts: must be an integer between 1 and 1000",
      "claimTtlMs: must be an integer between 1 and 86400000",
    ]);
    expect(orphanRetryPolicyIssues({ ...policy, maxDelayMs: 999 })).toEqual([
      "maxDelayMs: must be an integer between baseDelayMs and 604800000",
    ]);
  });
});

describe("redactSecrets", () => {
  it("removes every occurrence of every secret and ignores empty ones", () => {
    expect(redactSecrets("token=abc; again abc; key=xyz", ["abc", "", "xyz"])).toBe("token=[redacted]; again [redacted]; key=[redacted]");
    expect(redactSecrets("nothing here", [])).toBe("nothing here");
  });

  it("truncates after redacting, so a cut can never expose part of a secret", () => {
    const secret = "s".repeat(50);
    const out = redactSecrets(`${"x".repeat(MAX_ORPHAN_ERROR_LENGTH - 5)}${secret}`, [secret]);
    expect(out).toHaveLength(MAX_ORPHAN_ERROR_LENGTH);
    expect(out.endsWith("…")).toBe(true);
    expect(out).not.toContain("sss");
    expect(redactSecrets("abcdef", [], 4)).toBe("abc…");
    expect(redactSecrets("abcd", [], 4)).toBe("abcd");
  });
});

describe("package entry", () => {
  it("exports the runtime values of every module", () => {
    for (const name of [
      "canonicalJson",
      "runtimeScopeKey",
      "harnessIdentityOf",
      "resolveManagedRuntimePlan",
      "profileIssues",
      "composeCapabilities",
      "workspaceDurabilityOf",
      "publicationPointerIssues",
      "fenceIdentity",
      "assessRestorableCheckpoint",
      "sandboxLeaseIssues",
      "orphanRetryDelayMs",
      "redactSecrets",
    ]) {
      expect(typeof (contract as Record<string, unknown>)[name], name).toBe("function");
    }
    expect(contract.WORKSPACE_MOUNT_PATH).toBe("/workspace");
    expect(contract.OUTPUTS_MOUNT_PATH).toBe("/mnt/session/outputs");
    expect(contract.HARNESS_DRIVER_TYPES).toEqual(["ama_worker", "openma_supervised"]);
    expect(contract.WORKSPACE_STRATEGIES).toHaveLength(4);
    expect(contract.OUTPUT_STRATEGIES).toHaveLength(3);
    expect(contract.ORPHAN_REASONS).toContain("terminate_failed");
  });
});
