/** Environment config resolution and metadata validation. */
import { describe, expect, it } from "vitest";
import { ApiError } from "../errors.ts";
import { type EnvironmentConfig, parseMetadata, parseMetadataPatch, resolveConfig } from "./environment.ts";

const EMPTY = { type: "packages", apt: [], cargo: [], gem: [], go: [], npm: [], pip: [] };

describe("resolveConfig", () => {
  it("defaults to cloud with unrestricted networking and no packages", () => {
    expect(resolveConfig(undefined)).toEqual({ type: "cloud", networking: { type: "unrestricted" }, packages: EMPTY });
    expect(resolveConfig(null)).toEqual(resolveConfig(undefined));
    expect(resolveConfig({ type: "cloud", networking: null, packages: null })).toEqual(resolveConfig(undefined));
  });

  it("keeps stored inner fields that an update omits or nulls", () => {
    const stored: EnvironmentConfig = {
      type: "cloud",
      networking: { type: "limited", allowed_hosts: ["a.test"], allow_mcp_servers: true, allow_package_managers: false },
      packages: { ...EMPTY, type: "packages", npm: ["left-pad"], go: ["x"] },
    };
    const next = resolveConfig(
      {
        type: "cloud",
        networking: { type: "limited", allowed_hosts: null, allow_package_managers: true },
        packages: { go: null, pip: ["p"] },
      },
      stored,
    );
    expect(next).toEqual({
      type: "cloud",
      networking: { type: "limited", allowed_hosts: ["a.test"], allow_mcp_servers: true, allow_package_managers: true },
      packages: { ...EMPTY, npm: ["left-pad"], go: ["x"], pip: ["p"] },
    });
    // Switching to limited from unrestricted starts from the defaults.
    expect(resolveConfig({ type: "cloud", networking: { type: "limited" } }, resolveConfig(undefined))).toMatchObject({
      networking: { type: "limited", allowed_hosts: [], allow_mcp_servers: false, allow_package_managers: false },
    });
  });

  it("refuses a change of config type with invalid_config_type_change", () => {
    const err = (() => {
      try {
        resolveConfig({ type: "self_hosted" }, resolveConfig(undefined));
      } catch (e) {
        return e;
      }
    })();
    expect(err).toBeInstanceOf(ApiError);
    expect((err as ApiError).details).toEqual({ error_code: "invalid_config_type_change" });
    expect(resolveConfig({ type: "self_hosted" }, { type: "self_hosted" })).toEqual({ type: "self_hosted" });
  });
});

describe("metadata", () => {
  it("accepts valid maps and refuses problems with invalid_metadata naming the field", () => {
    expect(parseMetadata(undefined)).toEqual({});
    expect(parseMetadata({ a: "1" })).toEqual({ a: "1" });
    for (const bad of [
      { a: 1 },
      { ["k".repeat(65)]: "v" },
      { "": "v" },
      Object.fromEntries(Array.from({ length: 17 }, (_, i) => [`k${i}`, "v"])),
      "x",
    ]) {
      expect(() => parseMetadata(bad)).toThrowError(ApiError);
      try {
        parseMetadata(bad);
      } catch (e) {
        expect((e as ApiError).details).toEqual({ error_code: "invalid_metadata" });
        expect((e as ApiError).message).toContain("body.metadata");
      }
    }
  });

  it("parses patches: null values delete, a null patch clears, an absent one keeps", () => {
    expect(parseMetadataPatch({ a: null, b: "2" })).toEqual({ a: null, b: "2" });
    expect(parseMetadataPatch(null)).toBeNull();
    expect(parseMetadataPatch(undefined)).toBeUndefined();
    expect(() => parseMetadataPatch({ a: "x".repeat(513) })).toThrowError(/body\.metadata\.a/);
  });
});
