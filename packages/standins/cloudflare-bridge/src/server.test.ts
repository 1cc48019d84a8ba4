/**
 * The stand-in's container assignment, as the bridge's warm pool does it: one
 * container per sandbox id however many requests of the id arrive together
 * (the first ones, and the first ones after its container was deleted), and
 * none left once the id is deleted. Counted by the stand-in's own books and
 * by the engine's containers.
 */
import { type BridgeClient, createBridgeClient } from "@openma/cloudflare-bridge-client";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type CloudflareBridgeStandIn, startCloudflareBridgeStandIn } from "./server.ts";

const signal = () => AbortSignal.timeout(120_000);

describe("the cloudflare-bridge stand-in's container assignment", () => {
  let standIn: CloudflareBridgeStandIn;
  let client: BridgeClient;
  beforeAll(async () => {
    standIn = await startCloudflareBridgeStandIn();
    client = createBridgeClient({ url: standIn.env.CLOUDFLARE_BRIDGE_URL as string, apiKey: standIn.env.SANDBOX_API_KEY as string });
  }, 120_000);
  afterAll(async () => {
    await standIn?.close();
  });

  /** `n` execs of the id at once, each run to its end. */
  const together = (id: string, n: number, argv: string[]) =>
    Promise.all(
      Array.from({ length: n }, async () => {
        const end = await client.exec(id, { argv }, { signal: signal(), onOutput: () => {} });
        expect(end).toMatchObject({ type: "exit", exitCode: 0 });
      }),
    );

  it("gives concurrent requests of an id one container, a fresh one after a delete, and keeps none after the last delete", async () => {
    const id = await client.create(signal());
    await together(id, 4, ["true"]);
    expect(standIn.live()).toBe(1);
    expect(await standIn.boxes.containers()).toHaveLength(1);
    await client.writeFile(id, "/workspace/mark", new TextEncoder().encode("first"), signal());

    await client.destroy(id, signal());
    expect(standIn.live()).toBe(0);
    // The first requests after the delete share one fresh container: the old one's file is not in it.
    await together(id, 4, ["/bin/sh", "-c", "! test -e /workspace/mark"]);
    expect(standIn.live()).toBe(1);
    expect(await standIn.boxes.containers()).toHaveLength(1);

    await client.destroy(id, signal());
    expect(standIn.live()).toBe(0);
    expect(await standIn.boxes.containers()).toEqual([]);
  });

  it("never holds a container no id names when deletes and first requests of an id cross", async () => {
    const id = await client.create(signal());
    for (let round = 0; round < 6; round++) {
      await Promise.all([client.destroy(id, signal()), together(id, 2, ["true"]).catch(() => {}), client.destroy(id, signal())]);
      // Whatever order they landed in, every container the stand-in holds is the id's: the next delete ends it.
      expect(standIn.live()).toBeLessThanOrEqual(1);
    }
    await client.destroy(id, signal());
    expect(standIn.live()).toBe(0);
    expect(await standIn.boxes.containers()).toEqual([]);
  });
});
