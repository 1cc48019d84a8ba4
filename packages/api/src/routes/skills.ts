import { Hono } from "hono";
import type { AppEnv } from "../context.ts";

// Placeholder router: filled in by its own change.
export function skillRoutes(): Hono<AppEnv> {
  return new Hono<AppEnv>();
}
