/**
 * OPENMA_MAX_CONCURRENT_TRANSFERS: past it a transfer is refused at once with a
 * retryable 529 `overloaded_error`; a slot comes back when its transfer's
 * client goes away, not only when it completes.
 */
import { type IncomingMessage, request } from "node:http";
import Anthropic, { toFile } from "@anthropic-ai/sdk";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startTestServer, type TestServer } from "../support/server.ts";

describe("concurrent transfer slots", () => {
  let t: TestServer;
  beforeAll(async () => {
    t = await startTestServer("sqlite", { OPENMA_MAX_CONCURRENT_TRANSFERS: "1", OPENMA_TRANSFER_BUFFER_BYTES: String(64 * 1024) });
  });
  afterAll(async () => t?.close());

  const openDownload = (id: string) =>
    new Promise<IncomingMessage>((resolve, reject) => {
      const req = request(new URL(`/v1/files/${id}/content`, t.baseURL), { headers: { "x-api-key": t.apiKey } });
      req.on("response", (res) => {
        res.pause();
        resolve(res);
      });
      req.on("error", reject).end();
    });

  it("refuses a transfer past the limit with 529 and frees the slot when the client leaves", async () => {
    // Large enough that a reader that reads nothing leaves the transfer running.
    const file = await t.client.beta.files.upload({ file: await toFile(Buffer.alloc(32 * 1024 * 1024, 7), "big.bin") });
    const held = await openDownload(file.id);
    expect(held.statusCode).toBe(200);

    const refused = await t.client.beta.files.download(file.id).then(
      () => null,
      (err: unknown) => err,
    );
    expect(refused).toBeInstanceOf(Anthropic.APIError);
    expect((refused as InstanceType<typeof Anthropic.APIError>).status).toBe(529);
    expect((refused as InstanceType<typeof Anthropic.APIError>).error).toMatchObject({ error: { type: "overloaded_error" } });

    held.destroy();
    // The slot returns once the server sees the client gone.
    const deadline = Date.now() + 30_000;
    for (;;) {
      const ok = await t.client.beta.files.download(file.id).then(
        async (res) => (await res.arrayBuffer()).byteLength,
        () => null,
      );
      if (ok !== null) {
        expect(ok).toBe(32 * 1024 * 1024);
        break;
      }
      if (Date.now() > deadline) throw new Error("the transfer slot was never released");
      await new Promise((r) => setTimeout(r, 20));
    }
  });
});
