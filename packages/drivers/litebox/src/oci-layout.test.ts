/** The OCI layout the embedded runtime boots from, built from a `docker save` archive without a registry. */
import { createHash } from "node:crypto";
import { mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Readable } from "node:stream";
import { pack } from "tar-stream";
import { afterEach, describe, expect, it } from "vitest";
import { buildLayout, layoutManifest } from "./oci-layout.ts";

const sha256 = (bytes: Uint8Array) => createHash("sha256").update(bytes).digest("hex");

/** A `docker save` archive as the engine writes it: manifest.json, the config, one uncompressed layer tar per layer. */
function savedArchive(files: Record<string, Buffer>): Readable {
  const p = pack();
  for (const [name, content] of Object.entries(files)) p.entry({ name, size: content.length }, content);
  p.finalize();
  return Readable.from(p);
}

describe("the OCI layout from a docker save archive", () => {
  let dir: string | undefined;
  afterEach(async () => {
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it("stores every blob under its sha256 and names config and layers in order", async () => {
    dir = await mkdtemp(join(tmpdir(), "openma-oci-"));
    const config = Buffer.from(JSON.stringify({ architecture: "amd64", os: "linux", rootfs: { type: "layers", diff_ids: [] } }));
    const layers = [Buffer.from("first layer tar bytes"), Buffer.from("second layer tar bytes")];
    const archive = savedArchive({
      "abc.json": config,
      "l1/layer.tar": layers[0] as Buffer,
      "l2/layer.tar": layers[1] as Buffer,
      "manifest.json": Buffer.from(
        JSON.stringify([{ Config: "abc.json", RepoTags: ["img:tag"], Layers: ["l2/layer.tar", "l1/layer.tar"] }]),
      ),
    });
    await buildLayout(archive, dir, "img:tag");
    const manifest = await layoutManifest(dir);
    expect(manifest.config).toEqual({ digest: sha256(config), size: config.length });
    expect(manifest.layers.map((l) => l.digest)).toEqual([sha256(layers[1] as Buffer), sha256(layers[0] as Buffer)]);
    for (const blob of [manifest.config, ...manifest.layers]) {
      expect(sha256(await readFile(join(dir, "blobs", "sha256", blob.digest)))).toBe(blob.digest);
    }
    expect(JSON.parse(await readFile(join(dir, "oci-layout"), "utf8"))).toEqual({ imageLayoutVersion: "1.0.0" });
    const index = JSON.parse(await readFile(join(dir, "index.json"), "utf8"));
    expect(index.manifests[0].annotations["org.opencontainers.image.ref.name"]).toBe("img:tag");
  });

  it("refuses an archive whose manifest names a layer it lacks", async () => {
    dir = await mkdtemp(join(tmpdir(), "openma-oci-"));
    const archive = savedArchive({
      "abc.json": Buffer.from("{}"),
      "manifest.json": Buffer.from(JSON.stringify([{ Config: "abc.json", Layers: ["missing/layer.tar"] }])),
    });
    await expect(buildLayout(archive, dir, "img")).rejects.toThrow(/lacks missing\/layer.tar/);
  });
});
