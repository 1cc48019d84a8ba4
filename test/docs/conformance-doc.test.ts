/**
 * docs/sandboxes.md is generated from the conformance table: this fails when
 * someone changes one without the other, and when the table says something
 * the drivers it describes do not declare.
 */
import { existsSync, readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { conformanceOf, DRIVER_CONFORMANCE, type DriverConformance } from "@openma/contract/conformance";
import { BubblewrapSandbox } from "@openma/driver-bubblewrap";
import { NODE_DOCKER_SANDBOX_CAPABILITIES } from "@openma/driver-node-docker";
import { describe, expect, it } from "vitest";
import { DOC_PATH, renderSandboxesDoc } from "../../scripts/gen-conformance-doc.ts";

const ROOT = join(dirname(fileURLToPath(import.meta.url)), "..", "..");

describe("docs/sandboxes.md", () => {
  it("is exactly what the conformance table renders (regenerate: npx tsx scripts/gen-conformance-doc.ts)", () => {
    expect(readFileSync(DOC_PATH, "utf8")).toBe(renderSandboxesDoc());
  });

  it("changes when the table changes, so the check above can catch a stale page", () => {
    const edited = DRIVER_CONFORMANCE.map((entry) => (entry.driver === "bubblewrap" ? { ...entry, summary: "edited" } : entry));
    expect(renderSandboxesDoc(edited)).not.toBe(renderSandboxesDoc());
    expect(renderSandboxesDoc(edited)).toContain("| `bubblewrap` | implemented | edited");
  });

  it("refuses to render an inconsistent table", () => {
    const lying = DRIVER_CONFORMANCE.map((entry) =>
      entry.driver === "e2b" ? { ...entry, capabilities: { ...entry.capabilities, lanes: ["ama_worker" as const] } } : entry,
    );
    expect(() => renderSandboxesDoc(lying)).toThrow(/e2b: not implemented but its capabilities claim something/);
  });
});

describe("the table against the drivers it describes", () => {
  const entry = (driver: string) => conformanceOf(driver) as DriverConformance;

  it("node-docker: the table says what the driver declares", () => {
    const caps = entry("node-docker").capabilities;
    expect(caps.provider).toBe(NODE_DOCKER_SANDBOX_CAPABILITIES.provider);
    expect(caps.sandbox).toEqual(NODE_DOCKER_SANDBOX_CAPABILITIES.lifecycle);
    expect(caps.credentialEgress).toEqual(NODE_DOCKER_SANDBOX_CAPABILITIES.credentialEgress);
    expect(caps.sandboxPortFacts).toEqual(NODE_DOCKER_SANDBOX_CAPABILITIES.facts);
  });

  it("bubblewrap: every claim holds for a driver configured with the egress proxy", () => {
    const caps = entry("bubblewrap").capabilities;
    const driver = new BubblewrapSandbox({ stateRoot: "/nonexistent-never-created", network: { mode: "proxy", allow: ["example.com"] } });
    expect(caps.provider).toBe(driver.capabilities.provider);
    expect(caps.sandbox).toEqual(driver.capabilities.lifecycle);
    expect(caps.credentialEgress).toEqual(driver.capabilities.credentialEgress);
    expect(driver.capabilities.facts.has).toEqual(expect.arrayContaining([...caps.sandboxPortFacts.has]));
    expect(driver.capabilities.facts.lacks).toEqual(expect.arrayContaining([...caps.sandboxPortFacts.lacks]));
  });

  it("every implemented entry names a package that exists", () => {
    for (const e of DRIVER_CONFORMANCE.filter((x) => x.implemented)) {
      expect(existsSync(join(ROOT, e.package as string, "src", "index.ts")), e.driver).toBe(true);
    }
  });
});
