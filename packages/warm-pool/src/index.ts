export { parseWarmPoolTargets, type WarmPoolTargets } from "./config.ts";
export {
  isPoolScope,
  POOL_SESSION_PREFIX,
  type PoolOwner,
  type PoolSlot,
  poolScope,
  type WarmClaim,
  WarmPool,
  type WarmPoolOptions,
  type WarmPoolStats,
  type WarmProfile,
  type WarmSandbox,
  warmProfileKey,
} from "./pool.ts";
