/**
 * The stand-in as the official client sees it: SigV4 checked (a wrong
 * secret, an unknown key, a body changed after signing, a stale date and no
 * signature at all are each refused with the service's error), RunMicrovm
 * idempotent by clientToken, Get/List/Terminate, and each MicroVM a real
 * local sandbox that runs its image's run hook with the payload on stdin.
 */
import {
  GetMicrovmCommand,
  LambdaMicrovmsClient,
  ListMicrovmsCommand,
  RunMicrovmCommand,
  type ServiceInputTypes,
  type ServiceOutputTypes,
  TerminateMicrovmCommand,
} from "@aws-sdk/client-lambda-microvms";
import { ManualScheduler } from "@openma/time";
import type { FinalizeHandler, FinalizeHandlerArguments } from "@smithy/types";
import { afterEach, describe, expect, it } from "vitest";
import { type MicrovmsStandIn, startMicrovmsStandIn } from "./server.ts";

const PAYLOAD_FILE = "/tmp/run-hook-payload";
/** A run hook that records its payload and stays up until terminated. */
const RECORDER = { command: ["sh", "-c", `read -r line; printf '%s' "$line" > ${PAYLOAD_FILE}; exec sleep 3600`] };

describe("the AWS Lambda MicroVMs stand-in", () => {
  let standIn: MicrovmsStandIn | undefined;
  const clients: LambdaMicrovmsClient[] = [];
  afterEach(async () => {
    for (const c of clients.splice(0)) c.destroy();
    await standIn?.close();
    standIn = undefined;
  });

  async function start(scheduler?: ManualScheduler) {
    standIn = await startMicrovmsStandIn({ images: { recorder: RECORDER }, ...(scheduler ? { scheduler } : {}) });
    return standIn;
  }

  function client(s: MicrovmsStandIn, credentials = s.credentials): LambdaMicrovmsClient {
    const c = new LambdaMicrovmsClient({ region: s.region, endpoint: s.url, credentials, maxAttempts: 1 });
    clients.push(c);
    return c;
  }

  it("launches once per clientToken, conflicts on the same token with other parameters, and lists, gets and terminates", async () => {
    const s = await start();
    const c = client(s);
    const run = (payload: string) =>
      c.send(
        new RunMicrovmCommand({
          imageIdentifier: "recorder",
          runHookPayload: payload,
          clientToken: "tok-1",
          maximumDurationInSeconds: 600,
        }),
      );
    const first = await run('{"n":1}');
    expect(first).toMatchObject({ state: "PENDING", maximumDurationInSeconds: 600, imageVersion: "1" });
    expect(first.startedAt).toBeInstanceOf(Date);
    const again = await run('{"n":1}');
    expect(again.microvmId).toBe(first.microvmId);
    expect(s.launches()).toBe(1);
    await expect(run('{"n":2}')).rejects.toMatchObject({ name: "ConflictException", $metadata: { httpStatusCode: 409 } });

    // Without a token the SDK fills a fresh one: a second VM.
    const other = await c.send(new RunMicrovmCommand({ imageIdentifier: "recorder", runHookPayload: "{}" }));
    expect(other.microvmId).not.toBe(first.microvmId);
    expect(s.launches()).toBe(2);

    const listed = await c.send(new ListMicrovmsCommand({ imageIdentifier: "recorder", maxResults: 1 }));
    expect(listed.items).toHaveLength(1);
    expect(listed.nextToken).toBeDefined();
    const rest = await c.send(new ListMicrovmsCommand({ imageIdentifier: "recorder", nextToken: listed.nextToken }));
    expect([...(listed.items ?? []), ...(rest.items ?? [])].map((i) => i.microvmId).sort()).toEqual(
      [first.microvmId, other.microvmId].sort(),
    );

    await c.send(new TerminateMicrovmCommand({ microvmIdentifier: other.microvmId }));
    await c.send(new TerminateMicrovmCommand({ microvmIdentifier: other.microvmId }));
    expect(await c.send(new GetMicrovmCommand({ microvmIdentifier: other.microvmId }))).toMatchObject({ state: "TERMINATED" });
    await expect(c.send(new GetMicrovmCommand({ microvmIdentifier: "mvm-nope" }))).rejects.toMatchObject({
      name: "ResourceNotFoundException",
    });
    await expect(c.send(new RunMicrovmCommand({ imageIdentifier: "no-such-image" }))).rejects.toMatchObject({
      name: "ResourceNotFoundException",
    });
    await expect(c.send(new RunMicrovmCommand({ imageIdentifier: "recorder", maximumDurationInSeconds: 0 }))).rejects.toMatchObject({
      name: "ValidationException",
    });
  });

  it("refuses a wrong secret, an unknown key, a body changed after signing, a stale date and an unsigned request", async () => {
    const scheduler = new ManualScheduler(Date.now());
    const s = await start(scheduler);
    const run = new RunMicrovmCommand({ imageIdentifier: "recorder", clientToken: "tok" });
    await expect(client(s, { ...s.credentials, secretAccessKey: "wrong" }).send(run)).rejects.toMatchObject({
      name: "InvalidSignatureException",
      $metadata: { httpStatusCode: 403 },
    });
    await expect(client(s, { ...s.credentials, accessKeyId: "AKIDUNKNOWN" }).send(run)).rejects.toMatchObject({
      name: "UnrecognizedClientException",
    });

    const tampering = client(s);
    tampering.middlewareStack.addRelativeTo(
      (next: FinalizeHandler<ServiceInputTypes, ServiceOutputTypes>) => async (args: FinalizeHandlerArguments<ServiceInputTypes>) => {
        const request = args.request as { body: string };
        request.body = request.body.replace("recorder", "recordez");
        return next(args);
      },
      { relation: "after", toMiddleware: "httpSigningMiddleware", name: "tamper" },
    );
    await expect(tampering.send(run)).rejects.toMatchObject({ name: "InvalidSignatureException" });

    scheduler.advance(16 * 60_000);
    await expect(client(s).send(run)).rejects.toMatchObject({ name: "InvalidSignatureException", message: /expired/ });

    const unsigned = await fetch(`${s.url}/2025-09-09/microvms`, { method: "POST", body: "{}" });
    expect(unsigned.status).toBe(403);
    expect(unsigned.headers.get("x-amzn-errortype")).toBe("MissingAuthenticationTokenException");
    expect(s.launches()).toBe(0);
    expect(s.requests.filter((r) => r.authorized)).toEqual([]);
  });

  it("runs each MicroVM as a real sandbox whose run hook gets the payload, and terminating removes it", async () => {
    const s = await start();
    const c = client(s);
    const vm = await c.send(
      new RunMicrovmCommand({ imageIdentifier: "recorder", runHookPayload: '{"sessionId":"sesn_1"}', clientToken: "tok-box" }),
    );
    const id = vm.microvmId as string;
    await s.table.get(id)?.started;
    expect(await c.send(new GetMicrovmCommand({ microvmIdentifier: id }))).toMatchObject({ state: "RUNNING" });
    const box = s.table.get(id)?.box;
    if (box === undefined) throw new Error("the VM has no sandbox");
    // The hook wrote the payload from inside the sandbox (poll the file: the hook runs concurrently).
    let content = "";
    for (let i = 0; i < 200 && content === ""; i++) {
      const read = await box.tools.readFile({ path: PAYLOAD_FILE, maxBytes: 4096, signal: AbortSignal.timeout(10_000) });
      if (read.type === "ok") content = Buffer.from(read.content).toString("utf8");
    }
    expect(content).toBe('{"sessionId":"sesn_1"}');
    expect(await s.boxes.containers()).toHaveLength(1);
    await c.send(new TerminateMicrovmCommand({ microvmIdentifier: id }));
    expect(s.state(id)).toBe("gone");
    expect(await s.boxes.containers()).toEqual([]);
  });
});
