/**
 * docs/sandboxes.md is generated from the conformance table: this fails when
 * someone changes one without the other, and when the table says something
 * the drivers it describes do not declare.
 */
import { existsSync, readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { composeCapabilities } from "@openma/contract";
import { conformanceOf, DRIVER_CONFORMANCE, type DriverConformance } from "@openma/contract/conformance";
import { unbuilt as unbuiltRow } from "@openma/contract/conformance/rows";
import { BLAXEL_SANDBOX_CAPABILITIES } from "@openma/driver-blaxel";
import { BubblewrapSandbox } from "@openma/driver-bubblewrap";
import { CLOUDFLARE_SANDBOX_CAPABILITIES } from "@openma/driver-cloudflare";
import { CLOUDFLARE_BRIDGE_SANDBOX_CAPABILITIES } from "@openma/driver-cloudflare-bridge";
import { DAYTONA_SANDBOX_CAPABILITIES } from "@openma/driver-daytona";
import { E2B_SANDBOX_CAPABILITIES } from "@openma/driver-e2b";
import { MODAL_SANDBOX_CAPABILITIES } from "@openma/driver-modal";
import { NodeDockerSandbox } from "@openma/driver-node-docker";
import { SPRITES_SANDBOX_CAPABILITIES } from "@openma/driver-sprites";
import { SUPERSERVE_SANDBOX_CAPABILITIES } from "@openma/driver-superserve";
import { VERCEL_SANDBOX_CAPABILITIES } from "@openma/driver-vercel";
import { composedPort } from "@openma/egress/testing";
import { RemoteCheckpointWorkspace, RemoteSessionOutputs } from "@openma/remote-bindings";
import { FsBlobStore } from "@openma/storage/blobs";
import { realScheduler } from "@openma/time";
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
    const unbuilt = unbuiltRow("next-driver", "vm", "an unbuilt row", null);
    const lying = [...DRIVER_CONFORMANCE, { ...unbuilt, capabilities: { ...unbuilt.capabilities, lanes: ["ama_worker" as const] } }];
    expect(() => renderSandboxesDoc(lying)).toThrow(/next-driver: not implemented but its capabilities claim something/);
  });
});

describe("the table against the drivers it describes", () => {
  const entry = (driver: string) => conformanceOf(driver) as DriverConformance;

  it("node-docker: the table says what the driver composed with the egress gateway (as openma serve does) declares", () => {
    const caps = entry("node-docker").capabilities;
    const declared = new NodeDockerSandbox({ image: "unused", credentialEgress: composedPort() }).capabilities;
    expect(caps.provider).toBe(declared.provider);
    expect(caps.sandbox).toEqual(declared.lifecycle);
    expect(caps.credentialEgress).toEqual(declared.credentialEgress);
    expect(caps.sandboxPortFacts).toEqual(declared.facts);
  });

  it("bubblewrap: every claim holds for a driver composed with the egress gateway (as openma serve does)", () => {
    const caps = entry("bubblewrap").capabilities;
    const driver = new BubblewrapSandbox({ stateRoot: "/nonexistent-never-created", credentialEgress: composedPort() });
    expect(caps.provider).toBe(driver.capabilities.provider);
    expect(caps.sandbox).toEqual(driver.capabilities.lifecycle);
    expect(caps.credentialEgress).toEqual(driver.capabilities.credentialEgress);
    expect(driver.capabilities.facts.has).toEqual(expect.arrayContaining([...caps.sandboxPortFacts.has]));
    expect(driver.capabilities.facts.lacks).toEqual(expect.arrayContaining([...caps.sandboxPortFacts.lacks]));
  });

  it.each([
    ["e2b", E2B_SANDBOX_CAPABILITIES],
    ["daytona", DAYTONA_SANDBOX_CAPABILITIES],
    ["sprites", SPRITES_SANDBOX_CAPABILITIES],
    ["blaxel", BLAXEL_SANDBOX_CAPABILITIES],
    ["modal", MODAL_SANDBOX_CAPABILITIES],
    ["superserve", SUPERSERVE_SANDBOX_CAPABILITIES],
    // No streaming stdin: the `ama_worker` lane only.
    ["vercel", VERCEL_SANDBOX_CAPABILITIES, ["ama_worker"]],
    ["cloudflare-bridge", CLOUDFLARE_BRIDGE_SANDBOX_CAPABILITIES, ["ama_worker"]],
    ["cloudflare", CLOUDFLARE_SANDBOX_CAPABILITIES, ["ama_worker"]],
  ] as const)(
    "%s: the table says what the driver and the remote workspace and output ports declare",
    (driver, declared, lanes?: readonly ("ama_worker" | "openma_supervised")[]) => {
      const caps = entry(driver).capabilities;
      const never = () => {
        throw new Error("not used");
      };
      const store = new FsBlobStore("/nonexistent-never-created");
      const composed = composeCapabilities({
        sandbox: { capabilities: declared },
        workspace: new RemoteCheckpointWorkspace({ root: "/nonexistent", store, tools: never }),
        outputs: new RemoteSessionOutputs({ root: "/nonexistent", store, scheduler: realScheduler, tools: never }),
        lanes: lanes ?? ["ama_worker", "openma_supervised"],
      });
      expect(caps).toEqual(composed);
    },
  );

  it("every implemented entry names a package that exists", () => {
    for (const e of DRIVER_CONFORMANCE.filter((x) => x.implemented)) {
      expect(existsSync(join(ROOT, e.package as string, "src", "index.ts")), e.driver).toBe(true);
    }
  });
});
