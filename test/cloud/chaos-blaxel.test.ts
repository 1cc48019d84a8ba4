/** Chaos on the blaxel driver against its stand-in (see chaos.ts). */
import { describeChaos } from "./chaos.ts";

describeChaos("blaxel");
