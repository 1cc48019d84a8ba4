/** Chaos on the superserve driver against its stand-in (see chaos.ts). */
import { describeChaos } from "./chaos.ts";

describeChaos("superserve");
