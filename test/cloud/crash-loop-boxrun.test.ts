/** The kill -9 crash loop with boxrun boxes against its stand-in (see crash-loop.ts); 5 kills. */
import { describeCloudCrashLoop } from "./crash-loop.ts";

describeCloudCrashLoop("boxrun", 5);
