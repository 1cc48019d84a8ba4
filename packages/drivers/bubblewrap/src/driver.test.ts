import { conformanceOf, type DriverConformance } from "@openma/contract/conformance";
import { describeDriver } from "@openma/driver-suite";
import { composedPort } from "@openma/egress/testing";
import { describe, expect, it } from "vitest";
import { BubblewrapSandbox } from "./driver.ts";
import { assertBwrapInstalled, bubblewrapUnderTest } from "./test-support.ts";

describe("bubblewrap prerequisites", () => {
  it("bwrap is installed (otherwise: run `npm run provision`)", () => {
    expect(() => assertBwrapInstalled()).not.toThrow();
  });
});

// Every case of the shared suite, no skips: the default configuration (host /usr, no network, seccomp, rlimits).
describeDriver("bubblewrap", () => bubblewrapUnderTest());

describe("conformance entry", () => {
  it("claims exactly what a driver composed with the egress gateway (as openma serve does) declares", () => {
    const entry = conformanceOf("bubblewrap") as DriverConformance;
    const driver = new BubblewrapSandbox({ stateRoot: "/nonexistent-not-created", credentialEgress: composedPort() });
    expect(driver.capabilities.provider).toBe(entry.capabilities.provider);
    expect(driver.capabilities.lifecycle).toEqual(entry.capabilities.sandbox);
    expect(driver.capabilities.credentialEgress).toEqual(entry.capabilities.credentialEgress);
    expect(driver.capabilities.facts.has).toEqual(expect.arrayContaining([...entry.capabilities.sandboxPortFacts.has]));
    expect(driver.capabilities.facts.lacks).toEqual(expect.arrayContaining([...entry.capabilities.sandboxPortFacts.lacks]));
  });
});
