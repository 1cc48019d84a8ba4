/**
 * A small, dependency-free MIME guess for output manifests: the extension
 * first (what a person named the deliverable), then a few magic numbers, then
 * "text/plain" for clean UTF-8 and "application/octet-stream" otherwise.
 * It is a hint for clients, never a security decision.
 */

const BY_EXTENSION: Record<string, string> = {
  txt: "text/plain",
  log: "text/plain",
  md: "text/markdown",
  csv: "text/csv",
  tsv: "text/tab-separated-values",
  html: "text/html",
  htm: "text/html",
  css: "text/css",
  js: "text/javascript",
  mjs: "text/javascript",
  ts: "text/x-typescript",
  py: "text/x-python",
  sh: "application/x-sh",
  json: "application/json",
  jsonl: "application/jsonl",
  xml: "application/xml",
  yaml: "application/yaml",
  yml: "application/yaml",
  toml: "application/toml",
  pdf: "application/pdf",
  zip: "application/zip",
  gz: "application/gzip",
  tar: "application/x-tar",
  png: "image/png",
  jpg: "image/jpeg",
  jpeg: "image/jpeg",
  gif: "image/gif",
  webp: "image/webp",
  svg: "image/svg+xml",
  mp3: "audio/mpeg",
  wav: "audio/wav",
  mp4: "video/mp4",
  webm: "video/webm",
  docx: "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
  xlsx: "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
  pptx: "application/vnd.openxmlformats-officedocument.presentationml.presentation",
};

const MAGIC: Array<[number[], string]> = [
  [[0x89, 0x50, 0x4e, 0x47], "image/png"],
  [[0xff, 0xd8, 0xff], "image/jpeg"],
  [[0x47, 0x49, 0x46, 0x38], "image/gif"],
  [[0x25, 0x50, 0x44, 0x46], "application/pdf"],
  [[0x50, 0x4b, 0x03, 0x04], "application/zip"],
  [[0x1f, 0x8b], "application/gzip"],
];

export function guessMimeType(path: string, head: Uint8Array): string {
  const name = path.slice(path.lastIndexOf("/") + 1);
  const dot = name.lastIndexOf(".");
  if (dot > 0) {
    const byExt = BY_EXTENSION[name.slice(dot + 1).toLowerCase()];
    if (byExt) return byExt;
  }
  for (const [sig, type] of MAGIC) if (sig.every((b, i) => head[i] === b)) return type;
  const sample = head.subarray(0, 8192);
  if (sample.includes(0)) return "application/octet-stream";
  try {
    // `stream: true` tolerates a multi-byte character cut at the sample edge.
    new TextDecoder("utf-8", { fatal: true }).decode(sample, { stream: true });
    return "text/plain";
  } catch {
    return "application/octet-stream";
  }
}
