/** The kill -9 crash loop with cloudflare sandboxes (our Worker's routes, each session's egress installed first) against its stand-in (see crash-loop.ts); 5 kills. */
import { describeCloudCrashLoop } from "./crash-loop.ts";

describeCloudCrashLoop("cloudflare", 5);
