/**
 * sandbox-api's multipart upload, which `@blaxel/core` uses for files above
 * 5 MB: initiate (`POST /filesystem-multipart/initiate/{path}`), parts
 * (`PUT /filesystem-multipart/{uploadId}/part?partNumber=N`, a multipart
 * form with the part as `file`), then complete (`POST .../complete` with
 * the parts' numbers and etags) or abort (`DELETE .../abort`). Parts are
 * held in memory until the upload completes, then written as one file.
 */
import { createHash, randomUUID } from "node:crypto";
import type { StandInEnv } from "@openma/standin-kit";
import type { Context, Hono } from "hono";
import type { SandboxRecord } from "./sandboxes.ts";

type Ctx = Context<StandInEnv>;

/** What one upload may hold in memory. */
const MAX_UPLOAD_BYTES = 256 * 1024 * 1024;

interface Upload {
  sandbox: string;
  path: string;
  mode: number;
  parts: Map<number, { bytes: Uint8Array; etag: string }>;
  size: number;
}

export function mountMultipart(
  app: Hono<StandInEnv>,
  deps: {
    base: string;
    target(c: Ctx): Promise<SandboxRecord | Response>;
    /** The absolute path after `marker` in the request path, or null when it is malformed. */
    pathAfter(c: Ctx, marker: string): string | null;
    apiError(c: Ctx, status: number, error: string): Response;
  },
): void {
  const { base, target, pathAfter, apiError } = deps;
  const uploads = new Map<string, Upload>();
  const uploadOf = (c: Ctx, record: SandboxRecord) => {
    const upload = uploads.get(c.req.param("uploadId") ?? "");
    return upload?.sandbox === record.name ? upload : undefined;
  };

  app.post(`${base}/filesystem-multipart/initiate/*`, async (c) => {
    const record = await target(c);
    if (record instanceof Response) return record;
    const path = pathAfter(c, "/filesystem-multipart/initiate/");
    if (path === null) return apiError(c, 400, "invalid path");
    const body = (await c.req.json().catch(() => ({}))) as { permissions?: unknown };
    const mode =
      typeof body.permissions === "string" && /^[0-7]{3,4}$/.test(body.permissions) ? Number.parseInt(body.permissions, 8) : 0o644;
    const uploadId = randomUUID();
    uploads.set(uploadId, { sandbox: record.name, path, mode, parts: new Map(), size: 0 });
    return c.json({ uploadId, path });
  });

  app.put(`${base}/filesystem-multipart/:uploadId/part`, async (c) => {
    const record = await target(c);
    if (record instanceof Response) return record;
    const upload = uploadOf(c, record);
    if (!upload) return apiError(c, 404, "upload not found");
    const partNumber = Number(c.req.query("partNumber"));
    if (!Number.isInteger(partNumber) || partNumber < 1 || partNumber > 10_000)
      return apiError(c, 400, "partNumber must be an integer from 1 to 10000");
    const form = await c.req.formData().catch(() => null);
    const file = form?.get("file");
    if (!(file instanceof Blob)) return apiError(c, 400, "the part must be a multipart form with a file field");
    const bytes = new Uint8Array(await file.arrayBuffer());
    const previous = upload.parts.get(partNumber)?.bytes.length ?? 0;
    if (upload.size - previous + bytes.length > MAX_UPLOAD_BYTES) return apiError(c, 413, "upload too large");
    const etag = createHash("md5").update(bytes).digest("hex");
    upload.parts.set(partNumber, { bytes, etag });
    upload.size += bytes.length - previous;
    return c.json({ partNumber, etag, size: bytes.length });
  });

  app.post(`${base}/filesystem-multipart/:uploadId/complete`, async (c) => {
    const record = await target(c);
    if (record instanceof Response) return record;
    const upload = uploadOf(c, record);
    if (!upload) return apiError(c, 404, "upload not found");
    const body = (await c.req.json().catch(() => null)) as { parts?: unknown } | null;
    const listed = Array.isArray(body?.parts) ? (body.parts as Array<{ partNumber?: unknown; etag?: unknown }>) : null;
    if (listed === null || listed.length === 0) return apiError(c, 400, "parts are required");
    const chunks: Uint8Array[] = [];
    for (const part of listed) {
      const held = typeof part.partNumber === "number" ? upload.parts.get(part.partNumber) : undefined;
      if (!held || held.etag !== part.etag) return apiError(c, 400, `part ${String(part.partNumber)} was not uploaded with that etag`);
      chunks.push(held.bytes);
    }
    uploads.delete(c.req.param("uploadId") ?? "");
    const wrote = await record.box.tools.writeFile({
      path: upload.path,
      content: Buffer.concat(chunks),
      mode: upload.mode,
      signal: c.req.raw.signal,
    });
    if (wrote.type !== "ok") return apiError(c, 422, `error writing file: ${wrote.message}`);
    return c.json({ message: "File uploaded successfully", path: upload.path });
  });

  app.delete(`${base}/filesystem-multipart/:uploadId/abort`, async (c) => {
    const record = await target(c);
    if (record instanceof Response) return record;
    if (!uploadOf(c, record)) return apiError(c, 404, "upload not found");
    uploads.delete(c.req.param("uploadId") ?? "");
    return c.json({ message: "Upload aborted" });
  });
}
