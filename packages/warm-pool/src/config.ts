/**
 * `OPENMA_WARM_POOL`: the target size of each environment's warm pool, as
 * `<environment id>=<size>` pairs separated by commas
 * (`env_01abc=2,env_01def=1`). Unset or empty: no pools.
 */

/** A bound on one environment's pool, so a typo cannot start hundreds of sandboxes. */
export const MAX_WARM_POOL_TARGET = 64;

export type WarmPoolTargets = ReadonlyMap<string, number>;

const ENVIRONMENT_ID = /^[A-Za-z0-9_-]{1,128}$/;

export function parseWarmPoolTargets(text: string | undefined): { ok: true; targets: WarmPoolTargets } | { ok: false; message: string } {
  const targets = new Map<string, number>();
  for (const raw of (text ?? "").split(",")) {
    const entry = raw.trim();
    if (entry === "") continue;
    const at = entry.indexOf("=");
    const id = entry.slice(0, at).trim();
    const size = entry.slice(at + 1).trim();
    if (at < 0 || !ENVIRONMENT_ID.test(id))
      return { ok: false, message: `OPENMA_WARM_POOL: ${JSON.stringify(entry)} is not <environment id>=<size>` };
    if (!/^\d{1,3}$/.test(size) || Number(size) > MAX_WARM_POOL_TARGET)
      return { ok: false, message: `OPENMA_WARM_POOL: the size for ${id} must be an integer from 0 to ${MAX_WARM_POOL_TARGET}` };
    if (targets.has(id)) return { ok: false, message: `OPENMA_WARM_POOL: ${id} is listed twice` };
    targets.set(id, Number(size));
  }
  return { ok: true, targets };
}
