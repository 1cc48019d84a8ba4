import { describe, expect, it } from "vitest";
import type { RemoteSandboxApi } from "./api.ts";
import { spawnRemote } from "./process.ts";

/**
 * A provider whose output can reach the kit before the start call answers
 * (Blaxel's stdout and its start marker on stderr travel apart): the start
 * only rejects once its signal aborts, as a real provider's pending call does.
 */
function outputBeforeStart(): RemoteSandboxApi {
  return {
    stdinEof: true,
    start: ({ onOutput, signal }) =>
      new Promise((_, reject) => {
        signal.addEventListener("abort", () => reject(new Error("the exec start was aborted")), { once: true });
        onOutput("stdout", Buffer.from("first\n"));
      }),
    readFile: async () => null,
    writeFile: async () => {},
  };
}

describe("spawnRemote", () => {
  it("keeps the output seen before the start answered when the caller aborts on it", async () => {
    const live = new AbortController();
    const process = await spawnRemote(outputBeforeStart(), "/openma/run", {
      command: ["sh", "-c", "echo first; exec sleep 300"],
      cwd: "/workspace",
      signal: live.signal,
      onOutput: (stream, chunk) => {
        if (stream === "stdout" && Buffer.from(chunk).toString().includes("first")) live.abort();
      },
    });
    const result = await process.done;
    expect(result.type).toBe("aborted");
    expect(result.type === "aborted" && Buffer.from(result.stdout).toString()).toBe("first\n");
  });
});
