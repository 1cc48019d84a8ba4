/** kill -9 mid-turn with the official worker in cloudflare-bridge sandboxes (see crash.ts); the bridge cannot list, so the restarted host reaps from its lease records (ADR 0028). */
import { describeCloudCrash } from "./crash.ts";

describeCloudCrash("cloudflare-bridge");
