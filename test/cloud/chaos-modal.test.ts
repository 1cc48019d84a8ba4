/** Chaos on the modal driver against its stand-in (see chaos.ts). */
import { describeChaos } from "./chaos.ts";

describeChaos("modal");
