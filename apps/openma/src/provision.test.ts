/**
 * The first-start provisioner's decisions, and the real script it runs: on a
 * machine that already has bubblewrap, `provision.sh --embedded` is a no-op
 * that succeeds (the install path itself is proven in a container that lacks
 * bubblewrap: test/e2e/first-start-provision.test.ts).
 */
import { PassThrough } from "node:stream";
import { describe, expect, it } from "vitest";
import { hostProvisioner, provisionRefusal } from "./provision.ts";

function sink(): { stream: PassThrough; text: () => string } {
  const stream = new PassThrough();
  const chunks: Buffer[] = [];
  stream.on("data", (c: Buffer) => chunks.push(c));
  return { stream, text: () => Buffer.concat(chunks).toString("utf8") };
}

describe("first-start provisioning", () => {
  it("is attempted only as root with apt-get on PATH", () => {
    expect(provisionRefusal(1000, "/usr/bin:/bin")).toContain("needs root");
    expect(provisionRefusal(undefined, "/usr/bin:/bin")).toContain("needs root");
    expect(provisionRefusal(0, "/nonexistent")).toContain("no apt-get");
  });

  it("reports a refusal without running anything", async () => {
    const out = sink();
    const outcome = await hostProvisioner({ output: out.stream, uid: 1000, script: "/nonexistent/provision.sh" })();
    expect(outcome).toEqual({ type: "not_attempted", reason: expect.stringContaining("needs root") });
    expect(out.text()).toBe("");
  });

  it("runs scripts/provision.sh --embedded with its progress on the output, and reports its failure", async () => {
    const out = sink();
    const ok = await hostProvisioner({ output: out.stream })();
    expect(ok).toEqual({ type: "provisioned" });
    expect(out.text()).toContain("provision: packages present: bubblewrap");
    expect(out.text()).not.toContain("dockerd");

    const failing = await hostProvisioner({ output: sink().stream, script: "/nonexistent/provision.sh" })();
    expect(failing).toEqual({ type: "failed", reason: expect.stringContaining("exited with 127") });
  });
});
