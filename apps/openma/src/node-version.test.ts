/**
 * The CLI's Node version gate: a supported Node passes; an older one gets a
 * message naming the fix and exit code 1, never a stack trace. The process
 * test runs the real entry with `process.versions.node` made to read 20 (set
 * by a preloaded module before cli.ts runs), since the machine's Node is 24.
 */
import { execFile } from "node:child_process";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { MIN_NODE_MAJOR, unsupportedNode } from "./node-version.ts";

const CLI = join(import.meta.dirname, "cli.ts");
const AS_NODE_20 = "data:text/javascript,Object.defineProperty(process.versions,'node',{value:'20.20.2'})";

describe("the Node version gate", () => {
  it("accepts Node 24 and newer, refuses older with what to do", () => {
    expect(MIN_NODE_MAJOR).toBe(24);
    expect(unsupportedNode("24.0.0", "/x/node")).toBeNull();
    expect(unsupportedNode("26.1.0", "/x/node")).toBeNull();
    const refusal = unsupportedNode("22.9.0", "/usr/bin/node");
    expect(refusal).toContain("needs Node.js 24 or newer, but this is Node v22.9.0 (/usr/bin/node)");
    expect(refusal).toContain("npm start");
  });

  it("stops the CLI on an older Node with the message and exit code 1, before loading any command", async () => {
    const { code, stdout, stderr } = await new Promise<{ code: number | null; stdout: string; stderr: string }>((resolve) => {
      execFile(process.execPath, ["--import", AS_NODE_20, "--import", "tsx", CLI, "doctor"], { timeout: 60_000 }, (err, stdout, stderr) =>
        resolve({ code: err ? ((err as { code?: number }).code ?? 1) : 0, stdout, stderr }),
      );
    });
    expect(code).toBe(1);
    expect(stdout).toBe("");
    expect(stderr).toMatch(/^openma: OpenMA needs Node\.js 24 or newer, but this is Node v20\.20\.2 /);
    expect(stderr).not.toMatch(/\n\s+at /);
  });
});
