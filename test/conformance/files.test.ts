/** Files through the official SDK (no anthropic-beta header), on both storage backends. */
import { request } from "node:http";
import Anthropic, { toFile } from "@anthropic-ai/sdk";
import { contentKey, hashSecret } from "@openma/storage";
import { BACKENDS } from "@openma/storage/testing";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startTestServer, type TestServer } from "../support/server.ts";

async function errorOf(p: Promise<unknown>): Promise<InstanceType<typeof Anthropic.APIError>> {
  const err = await p.then(
    () => null,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(Anthropic.APIError);
  return err as InstanceType<typeof Anthropic.APIError>;
}

describe.each(BACKENDS)("files on %s", (dialect) => {
  let t: TestServer;
  beforeAll(async () => {
    t = await startTestServer(dialect);
  });
  afterAll(async () => t?.close());

  const upload = async (bytes: Uint8Array | string, name: string, type?: string, expires?: number) =>
    t.client.beta.files.upload({
      file: await toFile(typeof bytes === "string" ? Buffer.from(bytes) : bytes, name, type ? { type } : undefined),
      ...(expires === undefined ? {} : { expires_in_seconds: expires }),
    });

  it("uploads, describes, lists, downloads and deletes a file", async () => {
    const files = t.client.beta.files;
    const bytes = new Uint8Array([0, 1, 2, 250, 255, 10, 13]);
    const created = await upload(bytes, "reports/2026/q1 résumé.bin", "application/x-custom");
    expect(created).toMatchObject({
      type: "file",
      filename: "q1 résumé.bin",
      mime_type: "application/x-custom",
      size_bytes: bytes.byteLength,
      downloadable: true,
      expires_at: null,
      scope: null,
    });
    expect(created.id).toMatch(/^file_/);
    expect(await files.retrieveMetadata(created.id)).toEqual(created);

    const res = await files.download(created.id);
    expect(res.headers.get("content-type")).toBe("application/x-custom");
    expect(res.headers.get("content-disposition")).toContain("filename*=UTF-8''q1%20r%C3%A9sum%C3%A9.bin");
    expect(new Uint8Array(await res.arrayBuffer())).toEqual(bytes);

    const byId = [];
    for await (const f of files.list({ ids: [created.id] })) byId.push(f);
    expect(byId).toEqual([created]);

    expect(await files.delete(created.id)).toEqual({ id: created.id, type: "file_deleted" });
    expect(await errorOf(files.retrieveMetadata(created.id))).toBeInstanceOf(Anthropic.NotFoundError);
    expect(await errorOf(files.download(created.id))).toBeInstanceOf(Anthropic.NotFoundError);
    expect(await errorOf(files.delete(created.id))).toBeInstanceOf(Anthropic.NotFoundError);
  });

  it("strips client directories from filenames and guesses media types", async () => {
    const form = new FormData();
    form.append("file", new Blob(["{}"]), "..\\..\\evil\\data.json");
    const res = await fetch(`${t.baseURL}/v1/files`, { method: "POST", headers: { authorization: `Bearer ${t.apiKey}` }, body: form });
    expect(res.status).toBe(200);
    expect(await res.json()).toMatchObject({ filename: "data.json", mime_type: "application/json", size_bytes: 2 });
    const odd = await upload("x", "plain", "text/plain; charset=utf-8\r\nx-injected: 1");
    expect(odd.mime_type).toBe("application/octet-stream");
  });

  it("stores identical bytes once and frees the blob with the last reference", async () => {
    const content = `shared-${dialect}-${Date.now()}`;
    const { key } = contentKey("files", Buffer.from(content));
    const a = await upload(content, "a.txt");
    const b = await upload(content, "b.txt");
    const rows = await t.store.storage.db
      .selectFrom("files")
      .select(["id", "blob_key", "sha256"])
      .where("id", "in", [a.id, b.id])
      .execute();
    expect(new Set(rows.map((r) => r.blob_key))).toEqual(new Set([key]));
    await t.client.beta.files.delete(a.id);
    expect(await t.store.storage.blobs.exists(key)).toBe(true);
    expect(await (await t.client.beta.files.download(b.id)).text()).toBe(content);
    await t.client.beta.files.delete(b.id);
    expect(await t.store.storage.blobs.exists(key)).toBe(false);
  });

  it("expires files: expires_at is set, then reads are 404 file_expired and listings drop them", async () => {
    const before = Date.now();
    const f = await upload("temporary", "tmp.txt", "text/plain", 3600);
    const expiresAt = Date.parse(f.expires_at!);
    expect(expiresAt).toBeGreaterThanOrEqual(before + 3_600_000 - 1000);
    expect(expiresAt).toBeLessThanOrEqual(Date.now() + 3_600_000 + 1000);
    // Move the expiry into the past instead of waiting for it.
    await t.store.storage.db.updateTable("files").set({ expires_at: "2000-01-01T00:00:00.000Z" }).where("id", "=", f.id).execute();
    const err = await errorOf(t.client.beta.files.retrieveMetadata(f.id));
    expect(err).toBeInstanceOf(Anthropic.NotFoundError);
    expect(err.errorCode).toBe("file_expired");
    expect((await errorOf(t.client.beta.files.download(f.id))).status).toBe(404);
    const listed = [];
    for await (const x of t.client.beta.files.list({ ids: [f.id] })) listed.push(x);
    expect(listed).toEqual([]);
  });

  it("filters by scope_id and auto-paginates", async () => {
    const ids: string[] = [];
    for (let i = 0; i < 5; i++) ids.push((await upload(`page ${i}`, `p${i}.txt`)).id);
    const seen: string[] = [];
    for await (const f of t.client.beta.files.list({ limit: 2 })) seen.push(f.id);
    for (const id of ids) expect(seen).toContain(id);
    expect(new Set(seen).size).toBe(seen.length);

    await t.store.storage.db.updateTable("files").set({ scope: "sesn_scoped" }).where("id", "=", ids[0]!).execute();
    const scoped = [];
    for await (const f of t.client.beta.files.list({ scope_id: "sesn_scoped" })) scoped.push(f);
    expect(scoped.map((f) => [f.id, f.scope])).toEqual([[ids[0], { type: "session", id: "sesn_scoped" }]]);
  });

  it("refuses bad uploads with 400s and never requires an anthropic-beta header", async () => {
    const post = (body: BodyInit, headers: Record<string, string> = {}) =>
      fetch(`${t.baseURL}/v1/files`, { method: "POST", headers: { authorization: `Bearer ${t.apiKey}`, ...headers }, body });
    const noFile = new FormData();
    noFile.append("other", "x");
    expect(await (await post(noFile)).json()).toMatchObject({
      error: { type: "invalid_request_error", message: expect.stringContaining("file") },
    });
    expect((await post("{}", { "content-type": "application/json" })).status).toBe(400);
    const textPart = new FormData();
    textPart.append("file", "not a file");
    expect((await post(textPart)).status).toBe(400);
    for (const bad of ["0", "-5", "abc", "999999999999"]) {
      const form = new FormData();
      form.append("file", new Blob(["x"]), "x.txt");
      form.append("expires_in_seconds", bad);
      const res = await post(form);
      expect(res.status, bad).toBe(400);
      expect((await res.json()).error.message).toContain("expires_in_seconds");
    }
    const nul = new FormData();
    nul.append("file", new Blob(["x"]), "a\u0001b.txt");
    expect((await post(nul)).status).toBe(400);
    expect((await errorOf(t.client.beta.files.list({ limit: 0 }))).status).toBe(400);
  });

  it("answers 413 in the error shape for bodies over the 500 MB limit", async () => {
    const url = new URL(`${t.baseURL}/v1/files`);
    const { status, body } = await new Promise<{ status: number; body: string }>((resolve, reject) => {
      const req = request(
        {
          host: url.hostname,
          port: url.port,
          path: url.pathname,
          method: "POST",
          headers: {
            authorization: `Bearer ${t.apiKey}`,
            "content-type": "multipart/form-data; boundary=x",
            "content-length": String(600 * 1024 * 1024),
          },
        },
        (res) => {
          let text = "";
          res.on("data", (chunk) => {
            text += chunk;
          });
          res.on("end", () => {
            resolve({ status: res.statusCode ?? 0, body: text });
            req.destroy();
          });
        },
      );
      req.on("error", reject);
      req.write("--x\r\n");
    });
    expect(status).toBe(413);
    expect(JSON.parse(body)).toMatchObject({ type: "error", error: { type: "request_too_large" } });
  });

  it("answers NUL bytes in ids with 404 and in queries and cursors with 400, never 500 (Postgres text cannot hold them)", async () => {
    const store = await t.client.beta.memoryStores.create({ name: "nul" });
    const cursor = Buffer.from(JSON.stringify({ k: "a\u0000" })).toString("base64url");
    const probes: Array<[string, number]> = [
      ["/v1/files/file%00x", 404],
      ["/v1/files?ids[]=a%00", 400],
      [`/v1/files?page=${cursor}`, 400],
      ["/v1/vaults/vlt%00", 404],
      ["/v1/skills/skill_%00/versions/latest", 404],
      ["/v1/skills?source=a%00", 400],
      [`/v1/memory_stores/${store.id}/memories/mem_%00`, 404],
      [`/v1/memory_stores/${store.id}/memories?page=${cursor}`, 400],
      [`/v1/memory_stores/${store.id}/memory_versions?memory_id=a%00`, 400],
    ];
    for (const [path, status] of probes) {
      const res = await fetch(`${t.baseURL}${path}`, { headers: { authorization: `Bearer ${t.apiKey}` } });
      expect(res.status, path).toBe(status);
      expect((await res.json()).error.type).toBe(status === 404 ? "not_found_error" : "invalid_request_error");
    }
  });

  it("accepts only API keys", async () => {
    const envKey = `sk-ant-oat01-files-${dialect}`;
    await t.store.storage.db
      .insertInto("environment_keys")
      .values({ key_hash: hashSecret(envKey), environment_id: "env_files", created_at: new Date().toISOString(), revoked_at: null })
      .execute();
    expect(await errorOf(t.clientWith(envKey).beta.files.list())).toBeInstanceOf(Anthropic.PermissionDeniedError);
  });
});
