/** kill -9 mid-turn with the official worker in e2b sandboxes (see crash.ts). */
import { describeCloudCrash } from "./crash.ts";

describeCloudCrash("e2b");
