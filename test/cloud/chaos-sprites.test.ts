/** Chaos on the sprites driver against its stand-in (see chaos.ts). */
import { describeChaos } from "./chaos.ts";

describeChaos("sprites");
