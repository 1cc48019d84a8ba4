/** The kill -9 crash loop with e2b sandboxes against its stand-in (see crash-loop.ts). */
import { describeCloudCrashLoop } from "./crash-loop.ts";

describeCloudCrashLoop("e2b");
