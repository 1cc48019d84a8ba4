/**
 * A local OCI image layout from a Docker image, for the embedded BoxLite
 * runtime's `rootfsPath`: no registry is needed (none is reachable on the
 * machines this runs on). The engine's `docker save` archive (its
 * `manifest.json`, the config and the uncompressed layer tars) is streamed
 * through once: every blob is hashed while it is written, then renamed to
 * `blobs/sha256/<digest>`, and an OCI manifest and `index.json` name them.
 *
 * The layout is cached under the image id, so building it is a one-time
 * cost per image; a half-written one is never used (`index.json` is written
 * last, by rename).
 */
import { createHash } from "node:crypto";
import { createWriteStream } from "node:fs";
import { mkdir, readFile, rename, rm, stat, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { pipeline } from "node:stream/promises";
import { connectDocker } from "@openma/driver-node-docker/engine";
import type Docker from "dockerode";
import { extract } from "tar-stream";

const MANIFEST = "application/vnd.oci.image.manifest.v1+json";
const CONFIG = "application/vnd.oci.image.config.v1+json";
const LAYER = "application/vnd.oci.image.layer.v1.tar";

interface Blob {
  digest: string;
  size: number;
}

interface SavedManifest {
  Config: string;
  RepoTags?: string[] | null;
  Layers: string[];
}

/** The layout directory for `image` under `root` (built once per image id). */
export async function ociLayoutFor(image: string, root: string, docker: Docker = connectDocker()): Promise<string> {
  const id = ((await docker.getImage(image).inspect()).Id ?? "").replace(/^sha256:/, "");
  if (!/^[0-9a-f]{64}$/.test(id)) throw new Error(`docker image ${image} has no sha256 id`);
  const dir = join(root, id.slice(0, 32));
  if (await exists(join(dir, "index.json"))) return dir;
  await rm(dir, { recursive: true, force: true });
  await buildLayout(await docker.getImage(image).get(), dir, image);
  return dir;
}

async function exists(path: string): Promise<boolean> {
  return stat(path).then(
    () => true,
    () => false,
  );
}

/** Writes the layout of one `docker save` archive into `dir`. */
export async function buildLayout(archive: NodeJS.ReadableStream, dir: string, ref: string): Promise<void> {
  const blobs = join(dir, "blobs", "sha256");
  await mkdir(blobs, { recursive: true });
  const byName = new Map<string, Blob>();
  let saved: SavedManifest[] | null = null;
  let counter = 0;
  const ex = extract();
  ex.on("entry", (header, stream, next) => {
    const done = (err?: unknown) => (err ? ex.destroy(err as Error) : next());
    if (header.type !== "file") {
      stream.resume();
      stream.on("end", () => done());
      return;
    }
    if (header.name === "manifest.json") {
      const chunks: Buffer[] = [];
      stream.on("data", (chunk: unknown) => chunks.push(chunk as Buffer));
      stream.on("end", () => {
        try {
          saved = JSON.parse(Buffer.concat(chunks).toString("utf8")) as SavedManifest[];
          done();
        } catch (err) {
          done(err);
        }
      });
      return;
    }
    // Every other file may be a blob (config or layer): hashed while written, renamed once its digest is known.
    const temp = join(blobs, `.incoming-${counter++}`);
    const hash = createHash("sha256");
    let size = 0;
    stream.on("data", (chunk: unknown) => {
      hash.update(chunk as Buffer);
      size += (chunk as Buffer).length;
    });
    pipeline(stream, createWriteStream(temp))
      .then(async () => {
        const digest = hash.digest("hex");
        await rename(temp, join(blobs, digest));
        byName.set(header.name, { digest, size });
      })
      .then(() => done(), done);
  });
  await pipeline(archive, ex);
  const entry = (saved as SavedManifest[] | null)?.[0];
  if (!entry) throw new Error("the image archive has no manifest.json entry");
  const blobOf = (name: string): Blob => {
    const blob = byName.get(name);
    if (!blob) throw new Error(`the image archive lacks ${name}`);
    return blob;
  };
  const config = blobOf(entry.Config);
  const manifest = Buffer.from(
    JSON.stringify({
      schemaVersion: 2,
      mediaType: MANIFEST,
      config: { mediaType: CONFIG, digest: `sha256:${config.digest}`, size: config.size },
      layers: entry.Layers.map((name) => {
        const layer = blobOf(name);
        return { mediaType: LAYER, digest: `sha256:${layer.digest}`, size: layer.size };
      }),
    }),
  );
  const manifestDigest = createHash("sha256").update(manifest).digest("hex");
  await writeFile(join(blobs, manifestDigest), manifest);
  await writeFile(join(dir, "oci-layout"), JSON.stringify({ imageLayoutVersion: "1.0.0" }));
  const index = {
    schemaVersion: 2,
    manifests: [
      {
        mediaType: MANIFEST,
        digest: `sha256:${manifestDigest}`,
        size: manifest.length,
        annotations: { "org.opencontainers.image.ref.name": entry.RepoTags?.[0] ?? ref },
      },
    ],
  };
  await writeFile(join(dir, ".index.json"), JSON.stringify(index));
  await rename(join(dir, ".index.json"), join(dir, "index.json"));
}

/** The image's digest as the layout records it (for a test that the layout is whole). */
export async function layoutManifest(dir: string): Promise<{ config: Blob; layers: Blob[] }> {
  const index = JSON.parse(await readFile(join(dir, "index.json"), "utf8")) as { manifests: { digest: string }[] };
  const digest = (index.manifests[0]?.digest ?? "").replace(/^sha256:/, "");
  const manifest = JSON.parse(await readFile(join(dir, "blobs", "sha256", digest), "utf8")) as {
    config: { digest: string; size: number };
    layers: { digest: string; size: number }[];
  };
  const strip = (b: { digest: string; size: number }) => ({ digest: b.digest.replace(/^sha256:/, ""), size: b.size });
  return { config: strip(manifest.config), layers: manifest.layers.map(strip) };
}
