/** The box-name codec that carries the ownership marks BoxLite's REST create has no labels for. */
import { ownershipLabels, ownershipOf } from "@openma/driver-kit/remote";
import { describe, expect, it } from "vitest";
import { BoxNameError, boxNameFor, extraLabels, MAX_BOX_NAME, matchesExtra, parseBoxName } from "./names.ts";

const fence = {
  scope: { environmentId: "env_01HZK4TNRPQSXYZ8WM6NCVT9R5", sessionId: "sesn_01HZK4TNRPQSXYZ8WM6NCVT9R5" },
  ownerId: "sown_42",
  generation: 7,
};
const host = { "openma.runtime-host": "0123456789abcdef" };
const labels = ownershipLabels("boxrun", fence, "acquire-key", host);

describe("box names", () => {
  it("fit the API's pattern and give back the owner and generation verbatim, the scope as a digest", () => {
    const name = boxNameFor("openma-rh", labels);
    expect(name.length).toBeLessThanOrEqual(MAX_BOX_NAME);
    expect(name).toMatch(/^[a-zA-Z0-9][a-zA-Z0-9._-]*$/);
    const parsed = parseBoxName("openma-rh", name, "boxrun");
    expect(parsed).not.toBeNull();
    const owner = ownershipOf(parsed!.labels, "boxrun");
    expect(owner).toMatchObject({ ownerId: "sown_42", generation: 7 });
    expect(owner!.scope.sessionId).toMatch(/^sha256:[0-9a-f]{16}$/);
  });

  it("differ per generation, acquire key and scope, and are stable for the same acquire", () => {
    const name = boxNameFor("openma", labels);
    expect(boxNameFor("openma", { ...labels })).toBe(name);
    expect(boxNameFor("openma", ownershipLabels("boxrun", { ...fence, generation: 8 }, "acquire-key", host))).not.toBe(name);
    expect(boxNameFor("openma", ownershipLabels("boxrun", fence, "another-key", host))).not.toBe(name);
    const other = { ...fence, scope: { ...fence.scope, sessionId: "sesn_other" } };
    expect(boxNameFor("openma", ownershipLabels("boxrun", other, "acquire-key", host))).not.toBe(name);
  });

  it("match a listing only under the same operator labels", () => {
    const parsed = parseBoxName("openma", boxNameFor("openma", labels), "boxrun")!;
    expect(matchesExtra(parsed, { "openma.managed": "true", ...host })).toBe(true);
    expect(matchesExtra(parsed, { "openma.managed": "true", "openma.runtime-host": "another-host" })).toBe(false);
    expect(matchesExtra(parsed, {})).toBe(false);
    expect(extraLabels(labels)).toEqual(host);
  });

  it("refuse names of other prefixes, other shapes and foreign boxes", () => {
    const name = boxNameFor("openma", labels);
    expect(parseBoxName("openma-rh", name, "boxrun")).toBeNull();
    expect(parseBoxName("openma", "openma.not-ours", "boxrun")).toBeNull();
    expect(parseBoxName("openma", `${name}.extra`, "boxrun")).toBeNull();
    expect(parseBoxName("openma", null, "boxrun")).toBeNull();
  });

  it("refuse an owner id too long for 128 characters instead of truncating it", () => {
    const long = ownershipLabels("boxrun", { ...fence, ownerId: "o".repeat(100) }, "acquire-key", host);
    expect(() => boxNameFor("openma", long)).toThrow(BoxNameError);
    expect(() => boxNameFor("openma", long)).toThrow(/too long/);
  });
});
