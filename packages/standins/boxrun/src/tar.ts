/** The file-copy wire format of BoxLite's REST API: an in-memory tar, read and written with tar-stream. */
import { extract, pack } from "tar-stream";

export interface TarEntry {
  name: string;
  type: "file" | "directory";
  content: Uint8Array;
  mode: number;
}

/** Files and directories of a tar (other entry types are skipped). */
export function readTar(bytes: Uint8Array): Promise<TarEntry[]> {
  return new Promise((resolve, reject) => {
    const entries: TarEntry[] = [];
    const ex = extract();
    ex.on("entry", (header, stream, next) => {
      const chunks: Buffer[] = [];
      stream.on("data", (chunk: unknown) => chunks.push(chunk as Buffer));
      stream.on("end", () => {
        if (header.type === "file" || header.type === "directory")
          entries.push({ name: header.name, type: header.type, content: Buffer.concat(chunks), mode: (header.mode ?? 0o644) & 0o7777 });
        next();
      });
      stream.resume();
    });
    ex.on("finish", () => resolve(entries));
    ex.on("error", reject);
    ex.end(Buffer.from(bytes));
  });
}

export function writeTar(entries: readonly TarEntry[]): Promise<Uint8Array> {
  return new Promise((resolve, reject) => {
    const p = pack();
    const chunks: Buffer[] = [];
    p.on("data", (chunk: unknown) => chunks.push(chunk as Buffer));
    p.on("end", () => resolve(Buffer.concat(chunks)));
    p.on("error", reject);
    for (const e of entries) {
      if (e.type === "directory") p.entry({ name: e.name, type: "directory", mode: e.mode });
      else p.entry({ name: e.name, type: "file", mode: e.mode, size: e.content.length }, Buffer.from(e.content));
    }
    p.finalize();
  });
}
