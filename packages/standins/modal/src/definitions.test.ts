import { describe, expect, it } from "vitest";
import { modalDefinitions } from "./definitions.ts";

describe("the SDK's own service definitions", () => {
  it("come from the installed modal package, with the methods the stand-in serves", () => {
    const defs = modalDefinitions();
    expect(defs.sdkVersion).toMatch(/^0\.11\./);
    expect(defs.modalClient.fullName).toBe("modal.client.ModalClient");
    expect(defs.taskCommandRouter.fullName).toBe("modal.task_command_router.TaskCommandRouter");
    for (const name of ["authTokenGet", "appGetOrCreate", "imageGetOrCreate", "volumeGetOrCreate", "sandboxCreateV2", "sandboxTerminateV2"])
      expect(defs.modalClient.methods[name], name).toBeDefined();
    expect(defs.taskCommandRouter.methods.taskExecStdioRead).toMatchObject({ name: "TaskExecStdioRead", responseStream: true });
    // Evaluated once per process.
    expect(modalDefinitions()).toBe(defs);
  });

  it("round-trip a message with the SDK's field numbers", () => {
    const { requestType } = modalDefinitions().taskCommandRouter.methods.taskExecStdinWrite as {
      requestType: {
        encode(m: unknown): { finish(): Uint8Array };
        decode(b: Uint8Array): Record<string, unknown>;
        fromPartial(o: unknown): unknown;
      };
    };
    const bytes = requestType
      .encode(requestType.fromPartial({ taskId: "ta-1", execId: "ex-1", offset: 7, data: Buffer.from("hi"), eof: true }))
      .finish();
    // taskId is field 1 (tag 0x0a): the SDK's generated encoder, not a hand-written one.
    expect(bytes[0]).toBe(0x0a);
    expect(requestType.decode(bytes)).toMatchObject({ taskId: "ta-1", execId: "ex-1", offset: 7, eof: true });
  });
});
