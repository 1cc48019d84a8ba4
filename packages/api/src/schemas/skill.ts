/** Skill request fields: the multipart `display_name` and the list query. */
import { z } from "zod";
import { pageQuery } from "../pagination.ts";

export const SKILL_UPLOAD_LIMIT_BYTES = 30 * 1024 * 1024;

export const SKILL_SOURCES = ["custom", "anthropic", "anthropic_example", "plugin"] as const;

/** A single-line label: no control characters (newlines included), at most 255 characters. */
export const skillDisplayName = z
  .string()
  .min(1)
  .max(255)
  .refine((v) => !/[\p{Cc}\p{Cs}\u2028\u2029]/u.test(v), "must be a single line without control characters");

export const skillListQuery = z.object({
  ...pageQuery(100),
  source: z.string().max(64).optional(),
});

export const versionListQuery = z.object(pageQuery(100));
