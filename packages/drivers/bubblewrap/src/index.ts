/** @openma/driver-bubblewrap: daemonless local sandboxes on bubblewrap (see driver.ts for the isolation it gives). */
export { type BubblewrapOptions, BubblewrapSandbox, type NetworkOptions, PROVISION_HINT } from "./driver.ts";
export { type EgressDecision, type EgressOptions, EgressProxy, isAllowed, parseAllowlist } from "./egress.ts";
export type { ProcessEnd, SandboxProcess, Tools } from "./exec.ts";
export { type ExtraBind, HOST_ETC_ALLOWLIST } from "./layout.ts";
export { CgroupV1, DEFAULT_LIMITS, type LimitEnforcement, type ResourceLimits } from "./limits.ts";
export { bubblewrapProcesses } from "./process-port.ts";
export { DENIED_SYSCALLS, seccompProgram } from "./seccomp.ts";
export { PROVIDER as BUBBLEWRAP_PROVIDER } from "./state.ts";
