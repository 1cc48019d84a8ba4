/** Memory store, memory and memory-version request schemas (§6.5). */
import { z } from "zod";
import { memoryPathProblem, pathPrefixProblem } from "../memory-paths.ts";
import { documentListQuery } from "../pagination.ts";
import { metadataPatchSchema, metadataSchema, queryInt } from "../validate.ts";

export const MAX_CONTENT_BYTES = 102_400;
/** `view=full` pages hold at most this many items; `basic` ones at most 100. */
export const FULL_VIEW_PAGE_CAP = 20;
export const BASIC_VIEW_PAGE_CAP = 100;

const rfc3339 = z.iso.datetime({ offset: true });

export const memoryStoreCreateSchema = z.object({
  name: z.string().min(1).max(255),
  description: z.string().max(1024).optional(),
  metadata: metadataSchema.optional(),
});

export const memoryStoreUpdateSchema = z.object({
  name: z.string().min(1).max(255).nullish(),
  description: z.string().max(1024).nullish(),
  metadata: metadataPatchSchema.nullish(),
});

export const memoryStoreListQuery = documentListQuery();

export const memoryPath = z
  .string()
  .max(4096)
  .superRefine((path, ctx) => {
    const problem = memoryPathProblem(path);
    if (problem) ctx.addIssue({ code: "custom", message: problem });
  });

/**
 * Memory text: at most 102 400 UTF-8 bytes, well-formed (the sha is over the
 * exact bytes, so lone surrogates would hash differently from what is stored),
 * and without NUL, which Postgres text cannot hold.
 */
export const memoryContent = z
  .string()
  .max(MAX_CONTENT_BYTES)
  .refine((s) => !/\p{Cs}/u.test(s), "must be valid Unicode text")
  .refine((s) => !s.includes("\u0000"), "must not contain NUL characters")
  .refine((s) => Buffer.byteLength(s, "utf8") <= MAX_CONTENT_BYTES, `must be at most ${MAX_CONTENT_BYTES} bytes of UTF-8`);

const sha256 = z.string().regex(/^[0-9a-f]{64}$/, "must be 64 lowercase hexadecimal characters");

export const view = z.enum(["basic", "full"]);
export type MemoryView = z.infer<typeof view>;

export const memoryCreateSchema = z.object({
  path: memoryPath,
  // `null` is accepted as an empty memory (the SDK types allow it).
  content: memoryContent.nullable(),
});

export const memoryUpdateSchema = z.object({
  content: memoryContent.nullish(),
  path: memoryPath.nullish(),
  precondition: z.object({ type: z.literal("content_sha256"), content_sha256: sha256 }).optional(),
});

export const viewQuery = z.object({ view: view.optional() });

export const memoryDeleteQuery = z.object({ expected_content_sha256: sha256.optional() });

export const memoryListQuery = z.object({
  // Clamped to the view's page cap by the handler (the worker asks for exactly the caps).
  limit: queryInt(1, 1000).optional(),
  page: z.string().max(2048).optional(),
  view: view.optional(),
  depth: queryInt(0, 20).optional(),
  path_prefix: z
    .string()
    .max(4096)
    .superRefine((prefix, ctx) => {
      const problem = pathPrefixProblem(prefix);
      if (problem) ctx.addIssue({ code: "custom", message: problem });
    })
    .optional(),
});

const idFilter = z.string().min(1).max(256);

export const memoryVersionListQuery = z.object({
  limit: queryInt(1, 1000).optional(),
  page: z.string().max(2048).optional(),
  view: view.optional(),
  memory_id: idFilter.optional(),
  operation: z.enum(["created", "modified", "deleted"]).optional(),
  session_id: idFilter.optional(),
  api_key_id: idFilter.optional(),
  service_account_id: idFilter.optional(),
  "created_at[gte]": rfc3339.optional(),
  "created_at[lte]": rfc3339.optional(),
});

/** A list page size: default 20, clamped to the view's cap. */
export function pageLimit(requested: number | undefined, v: MemoryView): number {
  const cap = v === "full" ? FULL_VIEW_PAGE_CAP : BASIC_VIEW_PAGE_CAP;
  return Math.min(requested ?? 20, cap);
}
