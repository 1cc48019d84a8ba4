/**
 * The Modal stand-in as the official SDK sees it, beyond what the driver
 * suite covers: methods it does not model say so, a hostile volume subpath
 * is refused, and a sandbox ends at its own timeout (a sandbox whose host
 * died goes away without anyone terminating it). Real local containers.
 */
import { ManualScheduler } from "@openma/time";
import { ModalClient } from "modal";
import { createChannel, createClient, Metadata } from "nice-grpc";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { modalDefinitions } from "./definitions.ts";
import { type ModalStandIn, startModalStandIn } from "./server.ts";

let standIn: ModalStandIn;
let modal: ModalClient;
const scheduler = new ManualScheduler();

beforeAll(async () => {
  standIn = await startModalStandIn({ scheduler });
  // The SDK takes its address from the environment only, when a client is made.
  const before = process.env.MODAL_SERVER_URL;
  process.env.MODAL_SERVER_URL = standIn.env.MODAL_SERVER_URL;
  modal = new ModalClient({ tokenId: standIn.env.MODAL_TOKEN_ID, tokenSecret: standIn.env.MODAL_TOKEN_SECRET, logLevel: "error" });
  if (before === undefined) delete process.env.MODAL_SERVER_URL;
  else process.env.MODAL_SERVER_URL = before;
});

afterAll(async () => {
  await standIn?.close();
});

describe("the modal stand-in", () => {
  it("answers UNIMPLEMENTED, naming the method, for what it does not model", async () => {
    await expect(modal.secrets.fromName("nope")).rejects.toThrow(/SecretGetOrCreate is not implemented by the stand-in/);
  });

  it("refuses a volume subpath that leaves the volume, and starts nothing", async () => {
    const app = await modal.apps.fromName("standin-test", { createIfMissing: true });
    const volume = await modal.volumes.fromName("standin-test", { createIfMissing: true, version: 2 });
    await expect(
      modal.sandboxes.create(app, modal.images.fromRegistry("debian:bookworm"), {
        volumes: { "/workspace": volume.withMountOptions({ subPath: "../../etc" }) },
      }),
    ).rejects.toThrow(/subPath must stay inside the Volume/);
    expect(standIn.live()).toBe(0);
  });

  it("ends a sandbox at its timeout, container and all", async () => {
    const app = await modal.apps.fromName("standin-test", { createIfMissing: true });
    const sandbox = await modal.sandboxes.create(app, modal.images.fromRegistry("debian:bookworm"), { timeoutMs: 60_000 });
    expect(await sandbox.poll()).toBeNull();
    scheduler.advance(60_000);
    // The SDK's wait returns once the stand-in has ended it: TIMEOUT reads as exit 124.
    expect(await sandbox.wait()).toBe(124);
    expect(standIn.live()).toBe(0);
    expect(await standIn.boxes.containers()).toEqual([]);
  });

  it("refuses a command-router call that carries another sandbox's token", async () => {
    const app = await modal.apps.fromName("standin-test", { createIfMissing: true });
    const image = modal.images.fromRegistry("debian:bookworm");
    const [mine, theirs] = await Promise.all([modal.sandboxes.create(app, image), modal.sandboxes.create(app, image)]);
    const victim = standIn.table.get(theirs.sandboxId);
    const own = standIn.table.get(mine.sandboxId);
    const channel = createChannel(standIn.env.MODAL_SERVER_URL as string);
    try {
      // biome-ignore lint/suspicious/noExplicitAny: the definitions are evaluated from the SDK's bundle.
      const router = createClient(modalDefinitions().taskCommandRouter as any, channel) as any;
      const call = (token: string) =>
        router.taskExecStart(
          { taskId: victim?.taskId, execId: "ex-cross", commandArgs: ["true"] },
          { metadata: Metadata({ authorization: `Bearer ${token}` }) },
        );
      await expect(call(own?.routerJwt as string)).rejects.toThrow(/PERMISSION_DENIED|not valid for task/);
      expect(victim?.execs.size).toBe(0);
      await expect(call(victim?.routerJwt as string)).resolves.toEqual({});
    } finally {
      channel.close();
      await Promise.all([mine.terminate(), theirs.terminate()]);
    }
    expect(standIn.live()).toBe(0);
  });
});
