/** kill -9 mid-turn with the official worker in boxrun boxes (see crash.ts). */
import { describeCloudCrash } from "./crash.ts";

describeCloudCrash("boxrun");
