/**
 * The kill -9 crash loop with cloudflare-bridge sandboxes against its stand-in (see crash-loop.ts); 5 kills. The
 * bridge cannot list, so every leftover is found from the owner records' leases: the reaper reaps a stale record's
 * runtime before deleting the record, so a server killed mid-reap leaves the record for its successor.
 */
import { describeCloudCrashLoop } from "./crash-loop.ts";

describeCloudCrashLoop("cloudflare-bridge", 5);
