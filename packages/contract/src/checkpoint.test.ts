import { describe, expect, it } from "vitest";
import {
  assessCreatedCheckpoint,
  assessRestorableCheckpoint,
  MAX_RUNTIME_IDENTITY_LENGTH,
  type RuntimeCheckpointExpectation,
  type RuntimeCheckpointRef,
  runtimeCheckpointRefIssues,
} from "./checkpoint.ts";
import { fenceIdentity, MAX_OUTPUT_ENTRIES, publicationPointerIssues } from "./fence.ts";
import { MAX_SANDBOX_LEASE_JSON_LENGTH, sandboxLeaseIssues } from "./sandbox.ts";

const harness = { id: "pi", version: "1.2.3", runtimeIdentity: '{"type":"openma_supervised"}' };
const ref: RuntimeCheckpointRef = {
  provider: "e2b",
  checkpointId: "snap_1",
  kind: "process",
  sourceRuntimeId: "sbx_1",
  sessionId: "sesn_1",
  generation: 4,
  workspaceCandidateId: "ws_9",
  harness,
};
const expectation: RuntimeCheckpointExpectation = {
  provider: "e2b",
  sessionId: "sesn_1",
  generation: 5,
  kind: "process",
  harness,
  workspaceCandidateId: "ws_9",
};
const hash = `sha256:${"a".repeat(64)}`;

describe("runtime checkpoint refs", () => {
  it("validates structure", () => {
    expect(runtimeCheckpointRefIssues(ref)).toEqual([]);
    expect(runtimeCheckpointRefIssues({ ...ref, workspaceCandidateId: null })).toEqual([]);
    expect(runtimeCheckpointRefIssues("ref")).toEqual(["ref: must be an object"]);
    expect(
      runtimeCheckpointRefIssues({
        ...ref,
        provider: "",
        checkpointId: 1,
        sourceRuntimeId: undefined,
        sessionId: "a\nb",
        kind: "memory",
        generation: 0,
      }),
    ).toEqual([
      "provider: must be a non-empty identifier",
      "checkpointId: must be a non-empty identifier",
      "sourceRuntimeId: must be a non-empty identifier",
      "sessionId: must be a non-empty identifier",
      "kind: must be process or filesystem",
      "generation: must be a positive integer",
    ]);
    expect(runtimeCheckpointRefIssues({ ...ref, kind: "filesystem", generation: 1.5, workspaceCandidateId: "" })).toEqual([
      "generation: must be a positive integer",
      "workspaceCandidateId: must be an identifier or null",
    ]);
  });

  it.each([
    ["not an object", "pi"],
    ["a bad id", { ...harness, id: "" }],
    ["a bad version", { ...harness, version: 3 }],
    ["a missing identity", { id: "pi", version: "1" }],
    ["an oversized identity", { ...harness, runtimeIdentity: "x".repeat(MAX_RUNTIME_IDENTITY_LENGTH + 1) }],
  ])("rejects a harness identity with %s", (_name, bad) => {
    expect(runtimeCheckpointRefIssues({ ...ref, harness: bad })).toEqual(["harness: must be {id, version, runtimeIdentity}"]);
  });

  it("accepts a restore only from an earlier generation of the same session, provider, kind, harness and workspace", () => {
    expect(assessRestorableCheckpoint(ref, expectation)).toEqual({ type: "accepted", ref });
    const rejected = (value: unknown, expected = expectation) => {
      const result = assessRestorableCheckpoint(value, expected);
      return result.type === "rejected" ? result.reason : null;
    };
    expect(rejected({ ...ref, generation: "4" })).toBe("malformed");
    expect(rejected({ ...ref, provider: "daytona" })).toBe("provider_mismatch");
    expect(rejected({ ...ref, sessionId: "sesn_2" })).toBe("session_mismatch");
    expect(rejected({ ...ref, kind: "filesystem" })).toBe("kind_mismatch");
    expect(rejected({ ...ref, harness: { ...harness, id: "codex" } })).toBe("harness_mismatch");
    expect(rejected({ ...ref, harness: { ...harness, version: "1.2.4" } })).toBe("harness_mismatch");
    expect(rejected({ ...ref, harness: { ...harness, runtimeIdentity: "{}" } })).toBe("harness_mismatch");
    expect(rejected({ ...ref, workspaceCandidateId: "ws_8" })).toBe("workspace_mismatch");
    expect(rejected({ ...ref, workspaceCandidateId: null })).toBe("workspace_mismatch");
    expect(rejected(ref, { ...expectation, generation: 4 })).toBe("generation_mismatch");
    expect(rejected({ ...ref, generation: 9 })).toBe("generation_mismatch");
  });

  it("accepts a freshly created ref only for this generation and runtime", () => {
    const created = { ...expectation, generation: 4, runtimeId: "sbx_1" };
    expect(assessCreatedCheckpoint(ref, created)).toEqual({ type: "accepted", ref });
    expect(assessCreatedCheckpoint(ref, { ...created, generation: 5 })).toEqual({ type: "rejected", reason: "generation_mismatch" });
    expect(assessCreatedCheckpoint(ref, { ...created, runtimeId: "sbx_2" })).toEqual({ type: "rejected", reason: "runtime_mismatch" });
    expect(assessCreatedCheckpoint({ ...ref, provider: "x" }, created)).toEqual({ type: "rejected", reason: "provider_mismatch" });
  });
});

describe("publication pointers", () => {
  it("accepts any non-empty combination of valid refs and explicit clears", () => {
    expect(publicationPointerIssues({ workspace: { id: "ws", contentHash: hash, metadata: { files: 3 } } })).toEqual([]);
    expect(publicationPointerIssues({ outputs: { id: "out", contentHash: hash, entryCount: 0 }, runtimeCheckpoint: ref })).toEqual([]);
    expect(publicationPointerIssues({ workspace: null, outputs: null, runtimeCheckpoint: null })).toEqual([]);
  });

  it("names every problem", () => {
    expect(publicationPointerIssues(null)).toEqual(["pointers: must be an object"]);
    expect(publicationPointerIssues({})).toEqual(["pointers: at least one of workspace, outputs, runtimeCheckpoint is required"]);
    expect(publicationPointerIssues({ workspace: undefined, logs: 1 })).toEqual([
      "logs: unknown pointer",
      "pointers: at least one of workspace, outputs, runtimeCheckpoint is required",
    ]);
    expect(publicationPointerIssues({ workspace: "ws_1" })).toEqual(["workspace: must be an object or null"]);
    expect(publicationPointerIssues({ workspace: { id: "", contentHash: "sha256:ABC", metadata: { nested: {} } } })).toEqual([
      "workspace.id: must be a non-empty identifier",
      "workspace.contentHash: must be sha256:<64 hex>",
      "workspace.metadata: must be flat string/number/boolean/null values",
    ]);
    expect(publicationPointerIssues({ outputs: { id: "o", contentHash: hash, entryCount: -1 } })).toEqual([
      `outputs.entryCount: must be an integer between 0 and ${MAX_OUTPUT_ENTRIES}`,
    ]);
    expect(publicationPointerIssues({ outputs: { id: "o", contentHash: hash, entryCount: MAX_OUTPUT_ENTRIES + 1 } })).toHaveLength(1);
    expect(publicationPointerIssues({ outputs: { id: "o", contentHash: hash } })).toHaveLength(1);
    expect(publicationPointerIssues({ runtimeCheckpoint: { ...ref, kind: "memory" } })).toEqual([
      "runtimeCheckpoint.kind: must be process or filesystem",
    ]);
  });

  it("strips the token from a fence handed to other ports", () => {
    const fence = { scope: { environmentId: "env", sessionId: "sesn" }, ownerId: "host#1", generation: 2, token: "secret", expiresAt: 5 };
    const identity = fenceIdentity(fence);
    expect(identity).toEqual({ scope: fence.scope, ownerId: "host#1", generation: 2, expiresAt: 5 });
    expect(JSON.stringify(identity)).not.toContain("secret");
  });
});

describe("sandbox leases", () => {
  it("accepts a serializable, credential-free lease", () => {
    expect(
      sandboxLeaseIssues({
        provider: "docker",
        runtimeId: "oma-abc",
        metadata: { image: "worker:1", pid: 7, retained: false, note: null },
      }),
    ).toEqual([]);
    expect(sandboxLeaseIssues({ provider: "docker", runtimeId: "oma-abc" })).toEqual([]);
  });

  it("names what is wrong", () => {
    expect(sandboxLeaseIssues(undefined)).toEqual(["lease: must be an object"]);
    expect(sandboxLeaseIssues({ provider: "", runtimeId: 3, metadata: { env: { KEY: "v" } } })).toEqual([
      "provider: must be a non-empty identifier",
      "runtimeId: must be a non-empty identifier",
      "metadata: must be flat string/number/boolean/null values",
    ]);
    expect(sandboxLeaseIssues({ provider: "p", runtimeId: "r", metadata: { blob: "x".repeat(MAX_SANDBOX_LEASE_JSON_LENGTH) } })).toEqual([
      `lease: serialized form exceeds ${MAX_SANDBOX_LEASE_JSON_LENGTH} characters`,
    ]);
  });
});
