export type { RecordedRequest } from "./app.ts";
export { createS3App } from "./app.ts";
export { CHECKSUM_ALGORITHMS, type ChecksumAlgorithm, checksumValue } from "./checksums.ts";
export { decodeAwsChunked, encodeAwsChunked } from "./chunked.ts";
export { type Fault, S3_OPERATIONS, type S3Operation } from "./faults.ts";
export { type S3StandIn, type S3StandInOptions, startS3StandIn } from "./server.ts";
export { signRequest } from "./sigv4.ts";
