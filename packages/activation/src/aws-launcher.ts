/**
 * The AWS side of activation: one Lambda MicroVM per intent through the
 * official client (`@aws-sdk/client-lambda-microvms`). `clientToken` is the
 * intent's idempotency key (the SDK would otherwise fill a fresh UUID per
 * call, and a retried launch would make a second VM). Region, credentials and
 * endpoint are resolved the usual AWS way (AWS_REGION, the default credential
 * chain, AWS_ENDPOINT_URL_LAMBDA / AWS_ENDPOINT_URL): the stand-in is reached
 * by an endpoint override, never by a code path of its own.
 *
 * Every claim of an intent sends the same request (nothing per claim, such as
 * the lease generation, is in it): RunMicrovm refuses a known clientToken
 * with other parameters, so a retry after a crash must repeat the first
 * request exactly.
 *
 * The VM learns which session to serve from `runHookPayload` (delivered to the
 * image's run hook): session, environment and the control plane's URL. The
 * environment key is not in it: the image reads it from its own secret
 * (docs/activation.md), so it never passes through the launch API.
 */
import {
  LambdaMicrovmsClient,
  type LambdaMicrovmsClientConfig,
  ResourceNotFoundException,
  RunMicrovmCommand,
  TerminateMicrovmCommand,
} from "@aws-sdk/client-lambda-microvms";
import type { LaunchInput, MicrovmLauncherPort } from "./worker.ts";

export interface AwsMicrovmLauncherOptions {
  /** The MicroVM image holding the in-VM worker. */
  imageIdentifier: string;
  imageVersion?: string;
  executionRoleArn?: string;
  /** The control plane URL the in-VM worker polls. */
  apiUrl: string;
  /** Hard cap on a VM's life (1–28800 s); default one hour. */
  maximumDurationInSeconds?: number;
  /** Forwarded to the in-VM worker: how long it stays after the session went idle at `end_turn` (SDK default 60 s). */
  workerMaxIdleMs?: number;
  /** Client configuration beyond the environment's (tests pass credentials and endpoint here). */
  client?: LambdaMicrovmsClientConfig;
}

/** What the in-VM worker receives as its run hook payload. */
export interface RunHookPayload {
  activationId: string;
  environmentId: string;
  workspaceId: string;
  sessionId: string;
  apiUrl: string;
  maxIdleMs?: number;
}

export class AwsMicrovmLauncherPort implements MicrovmLauncherPort {
  readonly #client: LambdaMicrovmsClient;
  readonly #options: AwsMicrovmLauncherOptions;

  constructor(options: AwsMicrovmLauncherOptions) {
    this.#options = options;
    this.#client = new LambdaMicrovmsClient({ ...options.client });
  }

  async launch(input: LaunchInput): Promise<{ runtimeId: string }> {
    const payload: RunHookPayload = {
      activationId: input.activationId,
      environmentId: input.environmentId,
      workspaceId: input.workspaceId,
      sessionId: input.sessionId,
      apiUrl: this.#options.apiUrl,
      ...(this.#options.workerMaxIdleMs === undefined ? {} : { maxIdleMs: this.#options.workerMaxIdleMs }),
    };
    const out = await this.#client.send(
      new RunMicrovmCommand({
        imageIdentifier: this.#options.imageIdentifier,
        ...(this.#options.imageVersion ? { imageVersion: this.#options.imageVersion } : {}),
        ...(this.#options.executionRoleArn ? { executionRoleArn: this.#options.executionRoleArn } : {}),
        maximumDurationInSeconds: this.#options.maximumDurationInSeconds ?? 3600,
        runHookPayload: JSON.stringify(payload),
        clientToken: input.idempotencyKey,
      }),
      { abortSignal: input.signal },
    );
    if (!out.microvmId) throw new Error("RunMicrovm answered without a microvmId");
    return { runtimeId: out.microvmId };
  }

  /** Terminates the VM; one that is already gone counts as destroyed (TerminateMicrovm is idempotent). */
  async destroy(input: { runtimeId: string; signal: AbortSignal }): Promise<void> {
    try {
      await this.#client.send(new TerminateMicrovmCommand({ microvmIdentifier: input.runtimeId }), { abortSignal: input.signal });
    } catch (err) {
      if (!(err instanceof ResourceNotFoundException)) throw err;
    }
  }

  close(): void {
    this.#client.destroy();
  }
}
