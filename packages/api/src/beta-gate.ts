/**
 * Resources the SDK sends behind an `anthropic-beta` header answer 404 without
 * it, as the hosted API does, so a client that forgot the beta learns it the
 * same way. All of them are API-key only.
 */
import type { Context, Next } from "hono";
import { requireCredential } from "./auth.ts";
import type { AppEnv } from "./context.ts";
import { ApiError } from "./errors.ts";

export function betaGate(beta: string) {
  return async (c: Context<AppEnv>, next: Next) => {
    const betas = (c.req.header("anthropic-beta") ?? "").split(",").map((b) => b.trim());
    if (!betas.includes(beta)) throw new ApiError(404, "not_found_error", `no route for ${c.req.method} ${c.req.path}`);
    requireCredential(c, "api_key");
    await next();
  };
}

/**
 * What a self-hosted server cannot do (docs/api.md, "Not honoured"): the
 * SDK's BadRequestError with a message that says why and an `error_code`
 * a client can test for.
 */
export function notHonoured(why: string): ApiError {
  return new ApiError(400, "invalid_request_error", why, { error_code: "not_supported_self_hosted" });
}
