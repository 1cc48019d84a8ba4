/**
 * The subset of `modal.client.ModalClient` and
 * `modal.task_command_router.TaskCommandRouter` the `modal` SDK calls for
 * sandboxes, on the SDK's own message definitions:
 *
 *   ModalClient        AuthTokenGet, EnvironmentGetOrCreate, AppGetOrCreate,
 *                      ImageGetOrCreate, VolumeGetOrCreate, VolumeDelete,
 *                      SandboxCreateV2, SandboxGetTaskIdV2, SandboxWaitV2,
 *                      SandboxGetFromNameV2, SandboxListV2, SandboxTagsGetV2,
 *                      SandboxTagsSetV2, SandboxTerminateV2,
 *                      SandboxGetCommandRouterAccess
 *   TaskCommandRouter  TaskExecStart, TaskExecStdioRead (offset-resumable
 *                      server stream), TaskExecStdinWrite (by offset),
 *                      TaskExecPoll, TaskExecWait
 *
 * Every other method answers UNIMPLEMENTED, naming itself. Faults render as
 * gRPC statuses: a rate limit is RESOURCE_EXHAUSTED carrying the
 * `modal.client.RPCRetryPolicy` detail the SDK honours.
 */
import { randomBytes } from "node:crypto";
import type { Fault, FaultOp, FaultQueue, Hangs } from "@openma/standin-kit";
import { type CallContext, ServerError, Status } from "nice-grpc";
import type { ModalDefinitions } from "./definitions.ts";
import { ExecRecord } from "./execs.ts";
import { GENERIC_STATUS, jwt, type ModalTable, type SandboxRecord, safeSubPath } from "./table.ts";

export interface ServiceDeps {
  table: ModalTable;
  faults: FaultQueue;
  hangs: Hangs;
  defs: ModalDefinitions;
  /** `https://<host>:<port>`: what SandboxGetCommandRouterAccess hands out (the SDK dials it in plain text for a local server). */
  routerUrl: string;
  /** Auth tokens issued by AuthTokenGet. */
  tokens: Set<string>;
}

type Impl = Record<string, (request: never, context: CallContext) => unknown>;

/** The only mount point the stand-in's boxes can bind a volume at. */
const VOLUME_MOUNT = "/workspace";
const MAX_STDIO_CHUNK = 1024 * 1024;
/** The stand-in's `EnvironmentSettings.imageBuilderVersion`. */
const IMAGE_BUILDER_VERSION = "2025.06";

function statusOfHttp(status: number): Status {
  if (status === 400) return Status.INVALID_ARGUMENT;
  if (status === 401) return Status.UNAUTHENTICATED;
  if (status === 403) return Status.PERMISSION_DENIED;
  if (status === 404) return Status.NOT_FOUND;
  if (status === 409) return Status.ALREADY_EXISTS;
  if (status === 429) return Status.RESOURCE_EXHAUSTED;
  if (status === 503) return Status.UNAVAILABLE;
  if (status === 504) return Status.DEADLINE_EXCEEDED;
  return Status.INTERNAL;
}

/** Fills every method the stand-in does not serve with an UNIMPLEMENTED answer. */
function complete(definition: { fullName: string; methods: Record<string, { name: string }> }, impl: Impl): Impl {
  const out: Impl = {};
  for (const [key, method] of Object.entries(definition.methods)) {
    out[key] =
      impl[key] ??
      (() => {
        throw new ServerError(Status.UNIMPLEMENTED, `${definition.fullName}/${method.name} is not implemented by the stand-in`);
      });
  }
  return out;
}

export class Faulting {
  constructor(private readonly deps: ServiceDeps) {}

  /**
   * Applies a queued fault of one of `ops` (first match): throws its status, hangs, or ends the sandbox
   * first (`vanish`, then NOT_FOUND). A `cut` is returned for the caller to apply to its stream.
   */
  async apply(ops: readonly FaultOp[], context: CallContext, sandbox?: SandboxRecord): Promise<Fault | null> {
    let fault: Fault | undefined;
    for (const op of ops) {
      fault = this.deps.faults.take(op);
      if (fault) break;
    }
    if (fault === undefined || fault.kind === "cut") return fault ?? null;
    if (fault.kind === "status") throw new ServerError(statusOfHttp(fault.status ?? 500), "internal error (injected)");
    if (fault.kind === "rate_limited") {
      const { RPCStatus, RPCRetryPolicy } = this.deps.defs.messages;
      const policy = RPCRetryPolicy.encode(RPCRetryPolicy.fromPartial({ retryAfterSecs: fault.retryAfterSeconds ?? 1 })).finish();
      const status = RPCStatus.encode(
        RPCStatus.fromPartial({
          code: Status.RESOURCE_EXHAUSTED,
          message: "rate limited",
          details: [{ typeUrl: "type.googleapis.com/modal.client.RPCRetryPolicy", value: policy }],
        }),
      ).finish();
      context.trailer.set("grpc-status-details-bin", status);
      throw new ServerError(Status.RESOURCE_EXHAUSTED, "rate limited (injected)");
    }
    if (fault.kind === "hang") {
      await Promise.race([this.deps.hangs.hang(), new Promise((resolve) => context.signal.addEventListener("abort", resolve))]);
      throw new ServerError(Status.UNAVAILABLE, "the stand-in is closing");
    }
    if (sandbox) await this.deps.table.end(sandbox, { status: GENERIC_STATUS.failure, exception: "the sandbox vanished" });
    throw new ServerError(Status.NOT_FOUND, `sandbox ${sandbox?.sandboxId ?? ""} not found`);
  }
}

export function modalClientService(deps: ServiceDeps): Impl {
  const { table } = deps;
  const faults = new Faulting(deps);
  const sandboxOf = (sandboxId: string): SandboxRecord => {
    const sandbox = table.get(sandboxId);
    if (!sandbox) throw new ServerError(Status.NOT_FOUND, `Sandbox ${sandboxId} not found`);
    return sandbox;
  };
  const tagList = (s: SandboxRecord) => [...s.tags].map(([tagName, tagValue]) => ({ tagName, tagValue }));
  const impl: Impl = {
    authTokenGet: () => {
      const token = jwt({ exp: Math.floor(Date.now() / 1000) + 3600 });
      deps.tokens.add(token);
      return { token };
    },
    environmentGetOrCreate: (request: { deploymentName: string }) => ({
      environmentId: "en-standin",
      metadata: { name: request.deploymentName || "main", settings: { imageBuilderVersion: IMAGE_BUILDER_VERSION } },
    }),
    appGetOrCreate: (request: { appName: string; environmentName: string; objectCreationType: number }) => {
      if (!request.appName) throw new ServerError(Status.INVALID_ARGUMENT, "app name is required");
      const appId = table.appId(request.appName, request.environmentName, request.objectCreationType === 1);
      if (appId === null) throw new ServerError(Status.NOT_FOUND, `App '${request.appName}' not found`);
      return { appId };
    },
    imageGetOrCreate: (request: { appId: string; image?: { dockerfileCommands: string[] } }) => {
      if (!table.hasApp(request.appId)) throw new ServerError(Status.NOT_FOUND, `App ${request.appId} not found`);
      const commands = request.image?.dockerfileCommands ?? [];
      const imageId = `im-${randomBytes(11).toString("hex")}`;
      table.images.set(imageId, commands);
      return { imageId, result: { status: GENERIC_STATUS.success } };
    },
    volumeGetOrCreate: async (request: {
      deploymentName: string;
      environmentName: string;
      objectCreationType: number;
      version: number;
    }) => {
      if (request.objectCreationType === 5)
        throw new ServerError(Status.UNIMPLEMENTED, "ephemeral volumes are not implemented by the stand-in");
      if (!/^[A-Za-z0-9._-]{1,64}$/.test(request.deploymentName))
        throw new ServerError(Status.INVALID_ARGUMENT, `invalid Volume name '${request.deploymentName}'`);
      let volume = table.volumeByName(request.deploymentName, request.environmentName);
      if (volume === undefined) {
        if (request.objectCreationType !== 1) throw new ServerError(Status.NOT_FOUND, `Volume '${request.deploymentName}' not found`);
        volume = await table.createVolume(request.deploymentName, request.environmentName, request.version || 1);
      }
      return { volumeId: volume.volumeId, version: volume.version, metadata: { version: volume.version, name: volume.name } };
    },
    volumeDelete: async (request: { volumeId: string }) => {
      const volume = table.volumes.get(request.volumeId);
      if (!volume) throw new ServerError(Status.NOT_FOUND, `Volume ${request.volumeId} not found`);
      await table.deleteVolume(volume);
      return {};
    },
    sandboxCreateV2: async (
      request: {
        appId: string;
        tags: { tagName: string; tagValue: string }[];
        definition?: {
          name?: string;
          timeoutSecs: number;
          volumeMounts: { volumeId: string; mountPath: string; subPath?: string }[];
        };
      },
      context,
    ) => {
      await faults.apply(["create"], context);
      const definition = request.definition;
      if (!definition) throw new ServerError(Status.INVALID_ARGUMENT, "definition is required");
      if (!table.hasApp(request.appId)) throw new ServerError(Status.NOT_FOUND, `App ${request.appId} not found`);
      const name = definition.name ?? "";
      if (name !== "" && table.byName(request.appId, name, false))
        throw new ServerError(Status.ALREADY_EXISTS, `Sandbox with name '${name}' already exists`);
      if (definition.volumeMounts.length > 1) throw new ServerError(Status.INVALID_ARGUMENT, "the stand-in mounts at most one Volume");
      let volume = null;
      const mount = definition.volumeMounts[0];
      if (mount !== undefined) {
        if (mount.mountPath !== VOLUME_MOUNT)
          throw new ServerError(Status.INVALID_ARGUMENT, `the stand-in mounts Volumes at ${VOLUME_MOUNT} only, not ${mount.mountPath}`);
        const found = table.volumes.get(mount.volumeId);
        if (!found) throw new ServerError(Status.NOT_FOUND, `Volume ${mount.volumeId} not found`);
        const subPath = safeSubPath(mount.subPath);
        if (subPath === null) throw new ServerError(Status.INVALID_ARGUMENT, "subPath must stay inside the Volume");
        volume = { volume: found, subPath };
      }
      const timeoutSecs = definition.timeoutSecs > 0 ? definition.timeoutSecs : 300;
      const tags = new Map(request.tags.map((t) => [t.tagName, t.tagValue]));
      let sandbox: SandboxRecord;
      try {
        sandbox = await table.create({ appId: request.appId, name, tags, timeoutSecs, volume });
      } catch (err) {
        throw new ServerError(Status.UNAVAILABLE, `could not start the sandbox: ${err instanceof Error ? err.message : String(err)}`);
      }
      return {
        sandboxId: sandbox.sandboxId,
        taskId: sandbox.taskId,
        commandRouterAccess: { jwt: sandbox.routerJwt, url: deps.routerUrl },
      };
    },
    sandboxGetTaskIdV2: async (request: { sandboxId: string }, context) => {
      const sandbox = sandboxOf(request.sandboxId);
      await faults.apply(["get"], context, sandbox);
      return sandbox.result === null ? { taskId: sandbox.taskId } : { taskResult: sandbox.result };
    },
    sandboxWaitV2: async (request: { sandboxId: string; timeout: number }, context) => {
      const sandbox = sandboxOf(request.sandboxId);
      await faults.apply(["get"], context, sandbox);
      if (sandbox.result === null && request.timeout > 0) {
        const waited = AbortSignal.any([context.signal, AbortSignal.timeout(Math.min(request.timeout, 55) * 1000)]);
        await new Promise<void>((resolve) => {
          const check = () => (sandbox.result !== null || waited.aborted ? resolve() : setTimeout(check, 100).unref());
          check();
        });
      }
      return { result: sandbox.result ?? undefined, metadata: { appId: sandbox.appId, result: sandbox.result ?? undefined } };
    },
    sandboxGetFromNameV2: async (
      request: { sandboxName: string; appName: string; environmentName: string; includeTerminated: boolean },
      context,
    ) => {
      await faults.apply(["get"], context);
      const appId = table.appId(request.appName, request.environmentName, false);
      const sandbox = appId === null ? undefined : table.byName(appId, request.sandboxName, request.includeTerminated);
      if (!sandbox) throw new ServerError(Status.NOT_FOUND, `Sandbox '${request.sandboxName}' not found`);
      return { sandboxId: sandbox.sandboxId, metadata: { appId: sandbox.appId, result: sandbox.result ?? undefined } };
    },
    sandboxListV2: async (
      request: { appId?: string; beforeTimestamp: number; includeFinished: boolean; tags: { tagName: string; tagValue: string }[] },
      context,
    ) => {
      await faults.apply(["list"], context);
      const listed = table
        .running()
        .filter((s) => !request.appId || s.appId === request.appId)
        .filter((s) => request.tags.every((t) => s.tags.get(t.tagName) === t.tagValue))
        .filter((s) => !request.beforeTimestamp || s.createdAt < request.beforeTimestamp)
        .sort((a, b) => b.createdAt - a.createdAt)
        .slice(0, 100);
      return {
        sandboxes: listed.map((s) => ({ id: s.sandboxId, createdAt: s.createdAt, appId: s.appId, tags: tagList(s), name: s.name })),
      };
    },
    sandboxTagsGetV2: async (request: { sandboxId: string }, context) => {
      const sandbox = sandboxOf(request.sandboxId);
      await faults.apply(["get"], context, sandbox);
      return { tags: tagList(sandbox) };
    },
    sandboxTagsSetV2: (request: { sandboxId: string; tags: { tagName: string; tagValue: string }[] }) => {
      const sandbox = sandboxOf(request.sandboxId);
      sandbox.tags = new Map(request.tags.map((t) => [t.tagName, t.tagValue]));
      return {};
    },
    sandboxTerminateV2: async (request: { sandboxId: string }, context) => {
      const sandbox = sandboxOf(request.sandboxId);
      await faults.apply(["kill"], context);
      await table.end(sandbox, { status: GENERIC_STATUS.terminated });
      return {};
    },
    sandboxGetCommandRouterAccess: (request: { sandboxId: string }) => {
      const sandbox = sandboxOf(request.sandboxId);
      if (sandbox.result !== null) throw new ServerError(Status.FAILED_PRECONDITION, `Sandbox ${sandbox.sandboxId} has finished`);
      return { jwt: sandbox.routerJwt, url: deps.routerUrl };
    },
  };
  return complete(deps.defs.modalClient, impl);
}

/** Output file descriptors of TaskExecStdioRead (`TASK_EXEC_STDIO_FILE_DESCRIPTOR_*`). */
const STDIO = { 0: "stdout", 1: "stderr" } as const;

export function taskCommandRouterService(deps: ServiceDeps): Impl {
  const { table } = deps;
  const faults = new Faulting(deps);
  /** The task's sandbox, when the call carries that sandbox's own router JWT (a token of another sandbox is refused). */
  const owned = (taskId: string, context: CallContext): SandboxRecord => {
    const sandbox = table.byTask(taskId);
    if (!sandbox) throw new ServerError(Status.NOT_FOUND, `task ${taskId} not found`);
    if (String(context.metadata.get("authorization") ?? "") !== `Bearer ${sandbox.routerJwt}`)
      throw new ServerError(Status.PERMISSION_DENIED, `the token is not valid for task ${taskId}`);
    return sandbox;
  };
  const running = (taskId: string, context: CallContext): SandboxRecord => {
    const sandbox = owned(taskId, context);
    if (sandbox.result !== null || sandbox.box === null) throw new ServerError(Status.NOT_FOUND, `task ${taskId} has finished`);
    return sandbox;
  };
  const execOf = (taskId: string, execId: string, context: CallContext): ExecRecord => {
    const exec = owned(taskId, context).execs.get(execId);
    if (!exec) throw new ServerError(Status.NOT_FOUND, `exec ${execId} not found`);
    return exec;
  };
  const exitOf = (exec: ExecRecord) => (exec.exit === null ? {} : exec.exit);
  const impl: Impl = {
    taskExecStart: async (
      request: {
        taskId: string;
        execId: string;
        commandArgs: string[];
        workdir?: string;
        timeoutSecs?: number;
        env: Record<string, string>;
      },
      context,
    ) => {
      const sandbox = running(request.taskId, context);
      // An exec id is the client's: a retried start of one that exists is the same exec.
      if (sandbox.execs.has(request.execId)) return {};
      const fault = await faults.apply(["exec", "files"], context, sandbox);
      if (request.commandArgs.length === 0) throw new ServerError(Status.INVALID_ARGUMENT, "command_args is required");
      const box = sandbox.box;
      if (box === null) throw new ServerError(Status.NOT_FOUND, `task ${request.taskId} has finished`);
      const exec = new ExecRecord(request.execId, request.commandArgs);
      if (fault?.kind === "cut") exec.cutAfter = fault.afterBytes ?? 0;
      sandbox.execs.set(request.execId, exec);
      let proc: Awaited<ReturnType<typeof box.tools.spawn>>;
      try {
        proc = await box.tools.spawn({
          command: request.commandArgs,
          cwd: request.workdir || "/",
          env: { ...request.env },
          signal: exec.kill.signal,
          ...(request.timeoutSecs ? { timeoutMs: request.timeoutSecs * 1000 } : {}),
          onOutput: (stream, chunk) => exec.append(stream, chunk),
          // The exec record keeps the output; the box's own capture is only its tail.
          maxOutputBytes: 1024,
        });
      } catch (err) {
        sandbox.execs.delete(request.execId);
        throw new ServerError(Status.INVALID_ARGUMENT, `could not start the command: ${err instanceof Error ? err.message : String(err)}`);
      }
      exec.attach(proc);
      // A command that could not start exits 127, as a shell says; a killed or timed-out one reports SIGKILL.
      void proc.done.then((end) =>
        exec.finish(end.type === "exited" ? { code: end.exitCode } : end.type === "error" ? { code: 127 } : { signal: 9 }),
      );
      return {};
    },
    taskExecStdioRead: async function* (
      request: { taskId: string; execId: string; offset: number; fileDescriptor: 0 | 1 },
      context: CallContext,
    ) {
      const exec = execOf(request.taskId, request.execId, context);
      const stream = STDIO[request.fileDescriptor];
      if (stream === undefined) throw new ServerError(Status.INVALID_ARGUMENT, "unsupported file descriptor");
      let offset = Number(request.offset);
      // A cut drops the first stream opened after the fault, past its byte budget.
      const cut = exec.cutAfter === null ? null : offset + exec.cutAfter;
      exec.cutAfter = null;
      while (!context.signal.aborted) {
        const changed = exec.changed(context.signal);
        if (offset < exec.length[stream]) {
          const room = cut === null ? MAX_STDIO_CHUNK : Math.min(MAX_STDIO_CHUNK, cut - offset);
          if (room <= 0) throw new ServerError(Status.UNAVAILABLE, "stream cut (injected)");
          const data = exec.read(stream, offset, room);
          offset += data.length;
          yield { data };
          continue;
        }
        if (exec.exit !== null) return;
        await changed;
      }
    },
    taskExecStdinWrite: async (
      request: { taskId: string; execId: string; offset: number; data: Uint8Array; eof: boolean },
      context: CallContext,
    ) => {
      const exec = execOf(request.taskId, request.execId, context);
      try {
        await exec.writeStdin(Number(request.offset), request.data, request.eof);
      } catch (err) {
        throw new ServerError(Status.FAILED_PRECONDITION, err instanceof Error ? err.message : String(err));
      }
      return {};
    },
    taskExecPoll: (request: { taskId: string; execId: string }, context: CallContext) =>
      exitOf(execOf(request.taskId, request.execId, context)),
    taskExecWait: async (request: { taskId: string; execId: string }, context) => {
      const exec = execOf(request.taskId, request.execId, context);
      while (exec.exit === null && !context.signal.aborted) await exec.changed(context.signal);
      if (exec.exit === null) throw new ServerError(Status.CANCELLED, "the wait was cancelled");
      return exitOf(exec);
    },
  };
  return complete(deps.defs.taskCommandRouter, impl);
}
