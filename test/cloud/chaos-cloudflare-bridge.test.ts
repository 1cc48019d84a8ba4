/** Chaos on the cloudflare-bridge driver against its stand-in (see chaos.ts). */
import { describeChaos } from "./chaos.ts";

describeChaos("cloudflare-bridge");
