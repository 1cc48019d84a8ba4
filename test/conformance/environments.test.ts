/** Environments through the official SDK, on both storage backends. */
import Anthropic from "@anthropic-ai/sdk";
import {
  BetaEnvironmentArchivedError,
  BetaEnvironmentNotFoundError,
  BetaInvalidConfigTypeChangeError,
  BetaInvalidMetadataError,
} from "@anthropic-ai/sdk/resources/beta/environments/index";
import { BACKENDS } from "@openma/storage/testing";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startTestServer, type TestServer } from "../support/server.ts";

const EMPTY_PACKAGES = { type: "packages", apt: [], cargo: [], gem: [], go: [], npm: [], pip: [] };

describe.each(BACKENDS)("environments on %s", (dialect) => {
  let t: TestServer;
  beforeAll(async () => {
    t = await startTestServer(dialect);
  });
  afterAll(async () => t?.close());

  async function rotateKey(id: string, token = t.apiKey) {
    return fetch(`${t.baseURL}/v1/environments/${id}/environment_key`, { method: "POST", headers: { authorization: `Bearer ${token}` } });
  }

  it("creates a cloud environment by default and retrieves it", async () => {
    const envs = t.client.beta.environments;
    const created = await envs.create({ name: "default" });
    expect(created).toMatchObject({
      type: "environment",
      name: "default",
      description: null,
      metadata: {},
      archived_at: null,
      config: { type: "cloud", networking: { type: "unrestricted" }, packages: EMPTY_PACKAGES },
    });
    expect(created.id).toMatch(/^env_/);
    expect(created.created_at).toBe(created.updated_at);
    expect(created).not.toHaveProperty("environment_key");
    expect(await envs.retrieve(created.id)).toEqual(created);
  });

  it("expands a cloud config and merges a partial config update into the stored one", async () => {
    const envs = t.client.beta.environments;
    const created = await envs.create({
      name: "limited",
      description: "d",
      scope: "account",
      config: {
        type: "cloud",
        networking: { type: "limited", allowed_hosts: ["example.com"] },
        packages: { apt: ["git"], pip: ["requests"] },
      },
      metadata: { team: "a" },
    });
    expect(created.scope).toBe("account");
    expect(created.config).toEqual({
      type: "cloud",
      networking: { type: "limited", allowed_hosts: ["example.com"], allow_mcp_servers: false, allow_package_managers: false },
      packages: { ...EMPTY_PACKAGES, apt: ["git"], pip: ["requests"] },
    });

    const updated = await envs.update(created.id, {
      config: { type: "cloud", networking: { type: "limited", allow_mcp_servers: true }, packages: { pip: ["numpy"] } },
    });
    expect(updated.config).toEqual({
      type: "cloud",
      networking: { type: "limited", allowed_hosts: ["example.com"], allow_mcp_servers: true, allow_package_managers: false },
      packages: { ...EMPTY_PACKAGES, apt: ["git"], pip: ["numpy"] },
    });
    // A config with only the type keeps every stored inner field.
    const same = await envs.update(created.id, { config: { type: "cloud" } });
    expect(same.config).toEqual(updated.config);
    const opened = await envs.update(created.id, { config: { type: "cloud", networking: { type: "unrestricted" } } });
    expect(opened.config).toMatchObject({ networking: { type: "unrestricted" }, packages: { apt: ["git"], pip: ["numpy"] } });
  });

  it("applies the update rules for description, metadata, name and scope", async () => {
    const envs = t.client.beta.environments;
    const created = await envs.create({ name: "rules", description: "first", metadata: { a: "1", b: "2", c: "3" } });

    const unchanged = await envs.update(created.id, {});
    expect(unchanged).toEqual(created); // nothing changed, not even updated_at

    const kept = await envs.update(created.id, { name: "renamed" });
    expect(kept).toMatchObject({ name: "renamed", description: "first" });

    const emptied = await envs.update(created.id, { description: "" });
    expect(emptied.description).toBe("");
    const cleared = await envs.update(created.id, { description: null });
    expect(cleared.description).toBeNull();

    const patched = await envs.update(created.id, { metadata: { a: null, b: "", c: "30", d: "4" } });
    expect(patched.metadata).toEqual({ c: "30", d: "4" });
    expect(patched.name).toBe("renamed");

    const scoped = await envs.update(created.id, { scope: "organization" });
    expect(scoped.scope).toBe("organization");
    const unscoped = await envs.update(created.id, { scope: null });
    expect(unscoped).not.toHaveProperty("scope");
  });

  it("refuses a config type change, bad metadata and updates of archived environments", async () => {
    const envs = t.client.beta.environments;
    const cloud = await envs.create({ name: "typed" });

    const typeChange = await envs.update(cloud.id, { config: { type: "self_hosted" } }).catch((e: unknown) => e);
    expect(typeChange).toBeInstanceOf(BetaInvalidConfigTypeChangeError);
    expect((typeChange as BetaInvalidConfigTypeChangeError).errorCode).toBe("invalid_config_type_change");

    const tooMany = Object.fromEntries(Array.from({ length: 17 }, (_, i) => [`k${i}`, "v"]));
    const createMeta = await envs.create({ name: "m", metadata: tooMany }).catch((e: unknown) => e);
    expect(createMeta).toBeInstanceOf(BetaInvalidMetadataError);
    const patchMeta = await envs.update(cloud.id, { metadata: tooMany }).catch((e: unknown) => e);
    expect(patchMeta).toBeInstanceOf(BetaInvalidMetadataError);
    const longValue = await envs.update(cloud.id, { metadata: { k: "x".repeat(513) } }).catch((e: unknown) => e);
    expect(longValue).toBeInstanceOf(BetaInvalidMetadataError);
    expect((longValue as Error).message).toContain("body.metadata.k");
    // Nothing was written by the rejected requests.
    expect(await envs.retrieve(cloud.id)).toEqual(cloud);

    const archived = await envs.archive(cloud.id);
    expect(archived.archived_at).not.toBeNull();
    expect(await envs.archive(cloud.id)).toEqual(archived); // archiving twice changes nothing
    const late = await envs.update(cloud.id, { name: "late" }).catch((e: unknown) => e);
    expect(late).toBeInstanceOf(BetaEnvironmentArchivedError);
  });

  it("lists with include_archived and auto-paginates", async () => {
    const envs = t.client.beta.environments;
    const ids: string[] = [];
    for (let i = 0; i < 5; i++) ids.push((await envs.create({ name: `page-${i}` })).id);
    const gone = await envs.create({ name: "archived-one" });
    await envs.archive(gone.id);

    const seen: string[] = [];
    for await (const env of envs.list({ limit: 2 })) seen.push(env.id);
    for (const id of ids) expect(seen).toContain(id);
    expect(seen).not.toContain(gone.id);
    expect(new Set(seen).size).toBe(seen.length);
    expect([...seen].sort().reverse()).toEqual(seen); // newest first

    const all: string[] = [];
    for await (const env of envs.list({ include_archived: true, limit: 3 })) all.push(env.id);
    expect(all).toContain(gone.id);

    const page = await envs.list({ limit: 1 });
    expect(page.data).toHaveLength(1);
    expect(page.hasNextPage()).toBe(true);
  });

  it("issues an environment key once for self_hosted environments and rotates it on request", async () => {
    const envs = t.client.beta.environments;
    const created = (await envs.create({ name: "fleet", config: { type: "self_hosted" } })) as Anthropic.Beta.BetaEnvironment & {
      environment_key?: string;
    };
    expect(created.config).toEqual({ type: "self_hosted" });
    expect(created.environment_key).toMatch(/^sk-ant-oat01-/);
    const retrieved = await envs.retrieve(created.id);
    expect(retrieved).not.toHaveProperty("environment_key");
    const firstKey = created.environment_key as string;

    // The key is a worker credential for this environment, not an admin key.
    const fleet = t.clientWith(firstKey);
    expect((await fleet.beta.environments.work.list(created.id)).data).toEqual([]);
    await expect(fleet.beta.environments.retrieve(created.id)).rejects.toBeInstanceOf(Anthropic.PermissionDeniedError);
    expect((await rotateKey(created.id, firstKey)).status).toBe(403);

    const rotated = await rotateKey(created.id);
    expect(rotated.status).toBe(200);
    const body = (await rotated.json()) as { type: string; environment_id: string; environment_key: string };
    expect(body).toMatchObject({ type: "environment_key", environment_id: created.id });
    expect(body.environment_key).toMatch(/^sk-ant-oat01-/);
    expect(body.environment_key).not.toBe(firstKey);
    await expect(fleet.beta.environments.work.list(created.id)).rejects.toBeInstanceOf(Anthropic.AuthenticationError);
    expect((await t.clientWith(body.environment_key).beta.environments.work.list(created.id)).data).toEqual([]);

    const cloud = await envs.create({ name: "no-keys" });
    expect((await rotateKey(cloud.id)).status).toBe(400);
    const missing = await rotateKey("env_missing");
    expect(missing.status).toBe(404);
    expect(await missing.json()).toMatchObject({ error: { type: "not_found_error", details: { error_code: "environment_not_found" } } });
  });

  it("deletes an environment and revokes its keys", async () => {
    const envs = t.client.beta.environments;
    const created = (await envs.create({ name: "doomed", config: { type: "self_hosted" } })) as Anthropic.Beta.BetaEnvironment & {
      environment_key: string;
    };
    expect(await envs.delete(created.id)).toEqual({ id: created.id, type: "environment_deleted" });
    const gone = await envs.retrieve(created.id).catch((e: unknown) => e);
    expect(gone).toBeInstanceOf(BetaEnvironmentNotFoundError);
    await expect(envs.delete(created.id)).rejects.toBeInstanceOf(BetaEnvironmentNotFoundError);
    await expect(t.clientWith(created.environment_key).beta.environments.work.list(created.id)).rejects.toBeInstanceOf(
      Anthropic.AuthenticationError,
    );
  });

  it("maps errors to the SDK's classes", async () => {
    const envs = t.client.beta.environments;
    const nf = await envs.retrieve("env_missing").catch((e: unknown) => e);
    expect(nf).toBeInstanceOf(BetaEnvironmentNotFoundError);
    expect((nf as BetaEnvironmentNotFoundError).errorCode).toBe("environment_not_found");
    await expect(envs.update("env_missing", { name: "x" })).rejects.toBeInstanceOf(BetaEnvironmentNotFoundError);
    await expect(envs.archive("env_missing")).rejects.toBeInstanceOf(BetaEnvironmentNotFoundError);

    const bad = await envs.create({ name: "" }).catch((e: unknown) => e);
    expect(bad).toBeInstanceOf(Anthropic.BadRequestError);
    expect((bad as Error).message).toContain("body.name");
    const badConfig = await envs.create({ name: "x", config: { type: "moon" } as never }).catch((e: unknown) => e);
    expect(badConfig).toBeInstanceOf(Anthropic.BadRequestError);
    expect((badConfig as Error).message).toContain("body.config");
    const badQuery = await envs.list({ limit: 0 }).catch((e: unknown) => e);
    expect(badQuery).toBeInstanceOf(Anthropic.BadRequestError);
    const badCursor = await envs.list({ page: "!!" }).catch((e: unknown) => e);
    expect(badCursor).toBeInstanceOf(Anthropic.BadRequestError);

    // NUL cannot be stored in Postgres text: refused as input, never a 500.
    const nul = await envs.create({ name: "a\u0000b" }).catch((e: unknown) => e);
    expect(nul).toBeInstanceOf(Anthropic.BadRequestError);
    expect((nul as Error).message).toContain("body.name");
    await expect(envs.retrieve("env_\u0000")).rejects.toBeInstanceOf(BetaEnvironmentNotFoundError);
    await expect(envs.delete("env_\u0000")).rejects.toBeInstanceOf(BetaEnvironmentNotFoundError);
    const hostileCursor = Buffer.from(JSON.stringify({ k: "env_\u0000" })).toString("base64url");
    await expect(envs.list({ page: hostileCursor })).rejects.toBeInstanceOf(Anthropic.BadRequestError);

    await expect(t.clientWith("sk-ant-api03-wrong").beta.environments.list()).rejects.toBeInstanceOf(Anthropic.AuthenticationError);
    await expect(t.clientWith("sk-ant-oat01-unknown").beta.environments.list()).rejects.toBeInstanceOf(Anthropic.AuthenticationError);
  });
});
