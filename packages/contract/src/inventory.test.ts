import { describe, expect, it } from "vitest";
import { hasSandboxInventory, type SandboxListResult } from "./inventory.ts";

describe("hasSandboxInventory", () => {
  it("recognises a port that can list what it owns, and only such a port", () => {
    const listed: SandboxListResult = { type: "listed", runtimes: [] };
    expect(hasSandboxInventory({ listOwned: async () => listed })).toBe(true);
    expect(hasSandboxInventory({})).toBe(false);
    expect(hasSandboxInventory({ listOwned: "no" })).toBe(false);
  });
});
