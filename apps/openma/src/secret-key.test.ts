import { randomBytes } from "node:crypto";
import { mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { SecretBox, secretKeyId } from "@openma/storage";
import { afterEach, describe, expect, it } from "vitest";
import { loadConfig } from "./config.ts";
import { loadSecretKeys } from "./secret-key.ts";

const dirs: string[] = [];
function dataDir(): string {
  const dir = mkdtempSync(join(tmpdir(), "openma-secret-key-"));
  dirs.push(dir);
  return dir;
}
afterEach(() => {
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
});

describe("loadSecretKeys", () => {
  it("generates a key once into the data dir (0600) and reads it back on later starts", () => {
    const dir = dataDir();
    const first = loadSecretKeys(dir, undefined);
    expect(first).toMatchObject({ source: "data_dir", generated: true, file: join(dir, "secret-key") });
    expect(statSync(first.file).mode & 0o777).toBe(0o600);
    const key = Buffer.from(readFileSync(first.file, "utf8").trim(), "base64");
    expect(key).toHaveLength(32);
    expect(first.box.currentKeyId).toBe(secretKeyId(key));
    // No temporary file is left behind.
    expect(readdirSync(dir)).toEqual(["secret-key"]);

    const second = loadSecretKeys(dir, undefined);
    expect(second.generated).toBe(false);
    expect(second.box.currentKeyId).toBe(first.box.currentKeyId);
    const sealed = first.box.seal("x", "aad");
    expect(second.box.open(sealed, "aad")).toBe("x");
  });

  it("seals with the configured key, and still opens with older configured keys and the data dir's key", () => {
    const dir = dataDir();
    const fromFile = loadSecretKeys(dir, undefined).box;
    const current = randomBytes(32);
    const older = randomBytes(32);
    const keys = loadSecretKeys(dir, [current.toString("base64"), older.toString("base64")]);
    expect(keys).toMatchObject({ source: "configured", generated: false });
    expect(keys.box.currentKeyId).toBe(secretKeyId(current));
    expect(keys.box.keyIds).toEqual([secretKeyId(current), secretKeyId(older), fromFile.currentKeyId]);
    expect(keys.box.open(fromFile.seal("f", "a"), "a")).toBe("f");
    expect(keys.box.open(new SecretBox(older).seal("o", "a"), "a")).toBe("o");
  });

  it("configured without a key file: creates none", () => {
    const dir = dataDir();
    loadSecretKeys(dir, [randomBytes(32).toString("base64")]);
    expect(readdirSync(dir)).toEqual([]);
  });

  it("refuses a damaged key file without repeating its content", () => {
    const dir = dataDir();
    const content = "this-is-not-a-key-but-could-be-secret";
    writeFileSync(join(dir, "secret-key"), content, { mode: 0o600 });
    expect(() => loadSecretKeys(dir, undefined)).toThrow(/secret-key: a secret key must be base64 of 32 bytes/);
    try {
      loadSecretKeys(dir, undefined);
    } catch (err) {
      expect((err as Error).message).not.toContain(content);
    }
  });
});

describe("OPENMA_SECRET_KEY", () => {
  it("takes one key or a comma-separated rotation list", () => {
    const a = randomBytes(32).toString("base64");
    const b = randomBytes(32).toString("base64url");
    expect(loadConfig({}).secretKeys).toBeUndefined();
    expect(loadConfig({ OPENMA_SECRET_KEY: a }).secretKeys).toEqual([a]);
    expect(loadConfig({ OPENMA_SECRET_KEY: `${a}, ${b}` }).secretKeys).toEqual([a, b]);
  });

  it("refuses anything but 32-byte keys, without echoing the value", () => {
    for (const bad of [randomBytes(16).toString("base64"), "not a key", `${randomBytes(32).toString("base64")},`]) {
      let message = "";
      try {
        loadConfig({ OPENMA_SECRET_KEY: bad });
      } catch (err) {
        message = (err as Error).message;
      }
      expect(message).toMatch(/OPENMA_SECRET_KEY must be base64 of 32 bytes/);
      expect(message).not.toContain(bad);
    }
  });
});
