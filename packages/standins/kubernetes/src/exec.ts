/**
 * `pods/exec` over WebSocket, the channel protocol `@kubernetes/client-node`
 * speaks (`v5.channel.k8s.io`, falling back to v4): every binary frame
 * starts with a channel byte, 0 stdin, 1 stdout, 2 stderr, 3 the final
 * `metav1.Status` (exit code in `details.causes[reason=ExitCode]`), 4
 * resize, and in v5 255 closes a stream (`[255, 0]`: end of stdin). The
 * command really runs in the pod's container. As on a real node, a client
 * that disconnects does not kill the process: it only loses its output and
 * its stdin ends.
 */
import type { IncomingMessage } from "node:http";
import type { Box, UpgradeRoute } from "@openma/standin-kit";
import type { WebSocket } from "ws";
import { POD } from "./resources.ts";
import { StatusError } from "./status.ts";
import type { ObjectStore } from "./store.ts";

const STDIN = 0;
const STDOUT = 1;
const STDERR = 2;
const ERROR = 3;
const CLOSE = 255;
const PROTOCOLS = ["v5.channel.k8s.io", "v4.channel.k8s.io"];

export interface ExecDeps {
  store: ObjectStore;
  token: string;
  /** The running container behind a pod, by the pod's uid. */
  boxOf(podUid: string): Box | undefined;
}

function refusal(error: StatusError): { status: number; body: string } {
  return { status: error.code, body: JSON.stringify(error.toStatus()) };
}

function exitStatus(code: number, command: string[]): object {
  if (code === 0) return { metadata: {}, status: "Success" };
  return {
    metadata: {},
    status: "Failure",
    message: `command terminated with non-zero exit code: error executing command [${command.join(" ")}], exit code ${code}`,
    reason: "NonZeroExitCode",
    details: { causes: [{ reason: "ExitCode", message: String(code) }] },
  };
}

export function execRoute(deps: ExecDeps): UpgradeRoute {
  const target = (request: IncomingMessage, params: Record<string, string>) => {
    const pod = deps.store.get(POD, params.namespace as string, params.name as string);
    const box = deps.boxOf(pod.metadata.uid);
    if (box?.state !== "running") throw new StatusError(400, "BadRequest", `pod ${params.name} is not running`);
    const url = new URL(request.url ?? "/", "http://standin");
    const command = url.searchParams.getAll("command");
    if (command.length === 0) throw new StatusError(400, "BadRequest", "you must specify at least 1 command");
    return { box: box as Box, command, stdin: url.searchParams.get("stdin") === "true" };
  };
  return {
    match(path) {
      const m = /^\/api\/v1\/namespaces\/([^/]+)\/pods\/([^/]+)\/exec$/.exec(path);
      return m ? { namespace: decodeURIComponent(m[1] as string), name: decodeURIComponent(m[2] as string) } : null;
    },
    async accept(request, params) {
      if (request.headers.authorization !== `Bearer ${deps.token}`) return refusal(new StatusError(401, "Unauthorized", "Unauthorized"));
      const offered = String(request.headers["sec-websocket-protocol"] ?? "")
        .split(",")
        .map((p) => p.trim());
      if (!offered.some((p) => PROTOCOLS.includes(p))) {
        return refusal(
          new StatusError(400, "BadRequest", `unsupported subprotocols ${offered.join(", ")}; this server speaks ${PROTOCOLS.join(", ")}`),
        );
      }
      try {
        target(request, params);
        return null;
      } catch (err) {
        if (err instanceof StatusError) return refusal(err);
        throw err;
      }
    },
    open(socket, request, params) {
      runExec(socket, target(request, params));
    },
  };
}

function runExec(socket: WebSocket, exec: { box: Box; command: string[]; stdin: boolean }): void {
  let open = true;
  const send = (channel: number, payload: Uint8Array) => {
    if (open) socket.send(Buffer.concat([Buffer.from([channel]), Buffer.from(payload)]));
  };
  const started = exec.box.tools.spawn({
    command: exec.command,
    signal: new AbortController().signal,
    onOutput: (stream, chunk) => send(stream === "stdout" ? STDOUT : STDERR, chunk),
  });
  let stdinClosed = false;
  const closeStdin = () => {
    if (stdinClosed) return;
    stdinClosed = true;
    void started.then((proc) => proc.closeStdin());
  };
  if (!exec.stdin) closeStdin();
  socket.on("message", (data, isBinary) => {
    const bytes = Buffer.isBuffer(data) ? data : Buffer.from(data as ArrayBuffer);
    if (!isBinary || bytes.length === 0) return;
    if (bytes[0] === STDIN && !stdinClosed) {
      const chunk = bytes.subarray(1);
      void started.then((proc) => proc.write(chunk)).catch(() => {});
    } else if (bytes[0] === CLOSE && bytes[1] === STDIN) closeStdin();
  });
  socket.on("close", () => {
    open = false;
    closeStdin();
  });
  void started
    .then((proc) => proc.done)
    .then(
      (result) => {
        if (result.type === "error") {
          send(ERROR, Buffer.from(JSON.stringify({ metadata: {}, status: "Failure", message: result.message, reason: "InternalError" })));
        } else send(ERROR, Buffer.from(JSON.stringify(exitStatus(result.type === "exited" ? result.exitCode : 137, exec.command))));
        if (open) socket.close(1000);
      },
      (err: unknown) => {
        send(ERROR, Buffer.from(JSON.stringify({ metadata: {}, status: "Failure", message: String(err), reason: "InternalError" })));
        if (open) socket.close(1000);
      },
    );
}
