/** Chaos on the boxrun driver against its stand-in (see chaos.ts). */
import { describeChaos } from "./chaos.ts";

describeChaos("boxrun");
