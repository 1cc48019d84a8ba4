/** Chaos on the vercel driver against its stand-in (see chaos.ts). */
import { describeChaos } from "./chaos.ts";

describeChaos("vercel");
