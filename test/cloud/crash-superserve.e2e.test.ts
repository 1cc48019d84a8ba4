/** kill -9 mid-turn with the official worker in superserve sandboxes (see crash.ts). */
import { describeCloudCrash } from "./crash.ts";

describeCloudCrash("superserve");
