/**
 * The cloud drivers under test: each vendor's stand-in (its official SDK's
 * wire protocol, real local containers behind it) and the driver pointed at
 * it through the vendor's own variables, exactly as `openma` configures it.
 *
 * `cloudflare` is our Worker: the bridge stand-in plus the Worker's egress
 * route (the route's body and placeholders are the Worker's own code; the
 * stand-in stores the egress and enforces nothing, ADR 0019). Its driver
 * here gets no egress options, so every runtime is configured with nothing
 * allowed and no credential, as the driver fails closed; enforcement is
 * tested against the real Worker in workerd (test/cloud/cloudflare-*egress.test.ts).
 */

import { REMOTE_SANDBOX_DRIVERS } from "@openma/cli/remote-sandboxes";
import { blaxelConfigFromEnv, createBlaxelDriver } from "@openma/driver-blaxel";
import { boxRunConfigFromEnv, createBoxRunDriver } from "@openma/driver-boxrun";
import { cloudflareConfigFromEnv, createCloudflareDriver } from "@openma/driver-cloudflare";
import { cloudflareBridgeConfigFromEnv, createCloudflareBridgeDriver } from "@openma/driver-cloudflare-bridge";
import { createDaytonaDriver, daytonaConfigFromEnv } from "@openma/driver-daytona";
import { createE2BDriver, e2bConfigFromEnv } from "@openma/driver-e2b";
import type { RemoteDriverOptions, RemoteSandboxDriver } from "@openma/driver-kit/remote";
import { createModalDriver, modalConfigFromEnv } from "@openma/driver-modal";
import { createSpritesDriver, spritesConfigFromEnv } from "@openma/driver-sprites";
import { createSuperserveDriver, superserveConfigFromEnv } from "@openma/driver-superserve";
import { createVercelDriver, vercelConfigFromEnv } from "@openma/driver-vercel";
import { startBlaxelStandIn } from "@openma/standin-blaxel";
import { startBoxRunStandIn } from "@openma/standin-boxrun";
import { startCloudflareBridgeStandIn, startCloudflareWorkerStandIn } from "@openma/standin-cloudflare-bridge";
import { startDaytonaStandIn } from "@openma/standin-daytona";
import { startE2BStandIn } from "@openma/standin-e2b";
import type { CloudStandIn } from "@openma/standin-kit";
import { startModalStandIn } from "@openma/standin-modal";
import { startSpritesStandIn } from "@openma/standin-sprites";
import { startSuperserveStandIn } from "@openma/standin-superserve";
import { startVercelStandIn } from "@openma/standin-vercel";

/** Every remote driver but litebox, which is an embedded runtime with no service to stand in for. */
export type Vendor = Exclude<(typeof REMOTE_SANDBOX_DRIVERS)[number], "litebox">;
export const VENDORS: readonly Vendor[] = REMOTE_SANDBOX_DRIVERS.filter((d): d is Vendor => d !== "litebox");

export function startVendorStandIn(vendor: Vendor): Promise<CloudStandIn> {
  switch (vendor) {
    case "e2b":
      return startE2BStandIn();
    case "daytona":
      return startDaytonaStandIn();
    case "sprites":
      return startSpritesStandIn();
    case "blaxel":
      return startBlaxelStandIn();
    case "vercel":
      return startVercelStandIn();
    case "modal":
      return startModalStandIn();
    case "superserve":
      return startSuperserveStandIn();
    case "boxrun":
      return startBoxRunStandIn();
    case "cloudflare-bridge":
      return startCloudflareBridgeStandIn();
    case "cloudflare":
      return startCloudflareWorkerStandIn();
  }
}

function configured<C>(result: C | { missing: string[] }): C {
  if (typeof result === "object" && result !== null && "missing" in result)
    throw new Error(`missing ${(result as { missing: string[] }).missing.join(", ")}`);
  return result as C;
}

/** A fresh driver instance (as another process would build it) pointed at the stand-in. */
export function vendorDriver(vendor: Vendor, standIn: CloudStandIn, options: RemoteDriverOptions = {}): RemoteSandboxDriver {
  const env = standIn.env;
  switch (vendor) {
    case "e2b":
      return createE2BDriver(configured(e2bConfigFromEnv(env)), options);
    case "daytona":
      return createDaytonaDriver(configured(daytonaConfigFromEnv(env)), options);
    case "sprites":
      return createSpritesDriver(configured(spritesConfigFromEnv(env)), options);
    case "blaxel":
      return createBlaxelDriver(configured(blaxelConfigFromEnv(env)), options);
    case "vercel":
      return createVercelDriver(configured(vercelConfigFromEnv(env)), options);
    case "modal":
      return createModalDriver(configured(modalConfigFromEnv(env)), options);
    case "superserve":
      return createSuperserveDriver(configured(superserveConfigFromEnv(env)), options);
    case "boxrun":
      return createBoxRunDriver(configured(boxRunConfigFromEnv(env)), options);
    case "cloudflare-bridge":
      return createCloudflareBridgeDriver(configured(cloudflareBridgeConfigFromEnv(env)), options);
    case "cloudflare":
      return createCloudflareDriver(configured(cloudflareConfigFromEnv(env)), options);
  }
}
