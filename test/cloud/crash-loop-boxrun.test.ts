/** The kill -9 crash loop with boxrun boxes against its stand-in (see crash-loop.ts). */
import { describeCloudCrashLoop } from "./crash-loop.ts";

describeCloudCrashLoop("boxrun");
