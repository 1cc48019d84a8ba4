/** In-process stdio for the client commands: what they wrote, and a stdin the test can write to. */
import { PassThrough, Writable } from "node:stream";
import type { CliIo } from "../../apps/openma/src/cli/client.ts";

export interface CapturedIo extends CliIo {
  out(): string;
  err(): string;
}

function sink(chunks: string[], isTTY: boolean): Writable & { isTTY: boolean } {
  const stream = new Writable({
    write(chunk, _encoding, done) {
      chunks.push(String(chunk));
      done();
    },
  });
  return Object.assign(stream, { isTTY });
}

export function captureIo(env: Record<string, string>, opts: { tty?: boolean } = {}): CapturedIo {
  const out: string[] = [];
  const err: string[] = [];
  return {
    stdout: sink(out, opts.tty === true),
    stderr: sink(err, false),
    stdin: new PassThrough(),
    env,
    out: () => out.join(""),
    err: () => err.join(""),
  };
}
