/** Chaos on the daytona driver against its stand-in (see chaos.ts). */
import { describeChaos } from "./chaos.ts";

describeChaos("daytona");
