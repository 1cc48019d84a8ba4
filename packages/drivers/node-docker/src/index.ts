/** @openma/driver-node-docker: ManagedSandboxPort and ToolSandboxPort on the Docker Engine API. */
export {
  containerName,
  DEFAULT_LIMITS,
  LABELS,
  NODE_DOCKER_PROVIDER,
  NODE_DOCKER_SANDBOX_CAPABILITIES,
  NodeDockerSandbox,
  type NodeDockerSandboxOptions,
  type ResourceLimits,
  SANDBOX_HOME,
  SANDBOX_USER,
} from "./driver.ts";
export {
  connectDocker,
  DEFAULT_DOCKER_SOCKET,
  DEFAULT_IMAGE_MANIFEST,
  type EngineInfo,
  type ImageManifest,
  imagePresent,
  PROVISION_HINT,
  probeEngine,
  readImageManifest,
  statusOf,
} from "./engine.ts";
export {
  ensurePackageLayer,
  PACKAGES_ENVIRONMENT_LABEL,
  PACKAGES_LABEL,
  PACKAGES_REPO,
  type PackageLayerOptions,
} from "./package-layers.ts";
export { type ContainerProcess, type ContainerProcessInput, DEFAULT_MAX_OUTPUT_BYTES } from "./process.ts";
export { dockerProcesses } from "./process-port.ts";
export { type DockerExecInput, DockerToolSandbox, type DockerToolSandboxOptions } from "./tool-sandbox.ts";
