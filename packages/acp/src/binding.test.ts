import { describe, expect, it } from "vitest";
import { AcpStateError, bindAcpState } from "./binding.ts";
import { checkpointDocument, parseCheckpoint, parseSessionBinding, sessionBindingDocument } from "./files.ts";
import { profileFor } from "./profiles.ts";

describe("bindAcpState", () => {
  it("puts the live home in the ephemeral tree and the allowlist copies in the workspace", () => {
    const b = bindAcpState({ sessionId: "sesn_1", agent: { id: "pi-acp" } });
    expect(b.rootPath).toBe("/workspace/.openma/harness-state/acp/sesn_1/pi/v1");
    expect(b.nativePath).toBe("/tmp/openma-harness-state/acp/sesn_1/pi/v1/native");
    expect(b.checkpointPath).toBe(`${b.rootPath}/acp-session.json`);
    expect(b.bindingPath).toBe(`${b.rootPath}/session-binding.json`);
    expect(b.env).toEqual({
      HOME: `${b.nativePath}/home`,
      PI_CODING_AGENT_DIR: `${b.nativePath}/home/.pi/agent`,
      OPENMA_ACP_STATE_ROOT: "/tmp/openma-harness-state/acp/sesn_1/pi/v1",
    });
    expect(b.artifacts).toEqual([
      {
        path: `${b.rootPath}/native/home/.pi/agent/sessions`,
        runtimePath: `${b.nativePath}/home/.pi/agent/sessions`,
        kind: "directory",
        requiredForResume: true,
      },
      {
        path: `${b.rootPath}/native/home/.pi/pi-acp/session-map.json`,
        runtimePath: `${b.nativePath}/home/.pi/pi-acp/session-map.json`,
        kind: "file",
        requiredForResume: true,
      },
    ]);
    expect(b.durability).toBe("native");
  });

  it("binds a root-level variable to the native root itself", () => {
    const b = bindAcpState({ sessionId: "s", agent: { command: "/opt/agents/bin/codex-acp" } });
    expect(b.profile.id).toBe("codex");
    expect(b.env.CODEX_HOME).toBe(b.nativePath);
  });

  it("matches by registry id before command, and falls back to opaque", () => {
    expect(profileFor({ id: "gemini-cli", command: "node" }).id).toBe("gemini");
    expect(profileFor({ command: "qwen" }).id).toBe("qwen-code");
    expect(profileFor({ id: "nope", command: "/usr/bin/nope" }).id).toBe("opaque");
    const opaque = bindAcpState({ sessionId: "s", agent: { command: "x" } });
    expect(opaque.durability).toBe("opaque");
    expect(opaque.artifacts).toEqual([]);
    expect(bindAcpState({ sessionId: "s", agent: { id: "aider" } }).durability).toBe("acp");
  });

  it.each(["", "..", ".", "a/b", "../../etc", "sesn 1", "a".repeat(129), "s\n"])("refuses hostile session id %j", (id) => {
    expect(() => bindAcpState({ sessionId: id, agent: { id: "codex" } })).toThrow(AcpStateError);
  });

  it("refuses relative or dotted roots", () => {
    expect(() => bindAcpState({ sessionId: "s", agent: {}, workspaceRoot: "workspace" })).toThrow(AcpStateError);
    expect(() => bindAcpState({ sessionId: "s", agent: {}, ephemeralRoot: "/tmp/../etc" })).toThrow(AcpStateError);
  });
});

describe("durable files", () => {
  it("round-trips the binding manifest", () => {
    const b = bindAcpState({ sessionId: "s", agent: { id: "copilot" } });
    const doc = parseSessionBinding(sessionBindingDocument(b));
    expect(doc?.adapter_id).toBe("copilot");
    expect(doc?.session_artifacts.map((a) => a.kind)).toEqual(["directory", "sqlite"]);
    expect(parseSessionBinding("{")).toBeNull();
  });

  it("round-trips the checkpoint and rejects foreign or malformed ones", () => {
    const text = checkpointDocument({ adapterId: "codex", acpSessionId: "abc", lastCompletedTurnId: "evt_1" });
    expect(text.endsWith("\n")).toBe(true);
    expect(parseCheckpoint(text, "codex")).toEqual({ adapterId: "codex", acpSessionId: "abc", lastCompletedTurnId: "evt_1" });
    expect(parseCheckpoint(text, "claude-code")).toBeNull();
    expect(parseCheckpoint('{"version":2,"adapter_id":"codex","acp_session_id":"a"}', "codex")).toBeNull();
    expect(parseCheckpoint('{"version":1,"adapter_id":"codex","acp_session_id":""}', "codex")).toBeNull();
    expect(parseCheckpoint("not json", "codex")).toBeNull();
    expect(parseCheckpoint('{"version":1,"adapter_id":"codex","acp_session_id":"a"}', "codex")).toEqual({
      adapterId: "codex",
      acpSessionId: "a",
    });
  });
});
