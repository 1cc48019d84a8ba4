/**
 * kill -9 mid-turn with the official worker in cloudflare sandboxes (our Worker's routes; see crash.ts): each runtime
 * gets the runtime host's egress (the control plane's host only) before its first command, and, as on the bridge,
 * the restarted host reaps its predecessor's runtime from its lease records (ADR 0028).
 */
import { describeCloudCrash } from "./crash.ts";

describeCloudCrash("cloudflare");
