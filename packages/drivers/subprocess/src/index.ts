/** @openma/driver-subprocess: TEST ONLY ToolSandboxPort on host child processes (refused unless NODE_ENV=test). */
export { SUBPROCESS_DRIVER_REFUSAL, type SubprocessDriverOptions, SubprocessSandboxDriver } from "./driver.ts";
export { SubprocessToolSandbox } from "./sandbox.ts";
