/** Chaos on the cloudflare driver (our Worker: the bridge routes plus its egress route) against its stand-in (see chaos.ts). */
import { describeChaos } from "./chaos.ts";

describeChaos("cloudflare");
