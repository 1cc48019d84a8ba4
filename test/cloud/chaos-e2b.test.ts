/** Chaos on the e2b driver against its stand-in (see chaos.ts). */
import { describeChaos } from "./chaos.ts";

describeChaos("e2b");
