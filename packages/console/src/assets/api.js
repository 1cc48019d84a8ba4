// The public API, exactly as the SDK calls it: `/v1/...` with the `x-api-key` header.
const KEY_ITEM = "openma.console.apiKey";

export const apiKey = {
  get: () => localStorage.getItem(KEY_ITEM),
  set: (key) => localStorage.setItem(KEY_ITEM, key),
  clear: () => localStorage.removeItem(KEY_ITEM),
};

export class ApiError extends Error {
  constructor(status, body) {
    super(body?.error?.message ?? `HTTP ${status}`);
    this.status = status;
    this.body = body;
  }
}

export function headers(extra = {}) {
  return { "x-api-key": apiKey.get() ?? "", ...extra };
}

/** One API call; the error body's message becomes the thrown error's. */
export async function api(path, { method = "GET", body, query, signal } = {}) {
  const url = new URL(path, location.origin);
  for (const [k, v] of Object.entries(query ?? {})) {
    for (const item of Array.isArray(v) ? v : [v]) if (item !== undefined && item !== "") url.searchParams.append(k, item);
  }
  const res = await fetch(url, {
    method,
    signal,
    headers: headers(body === undefined ? {} : { "content-type": "application/json" }),
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  const json = text ? JSON.parse(text) : null;
  if (!res.ok) throw new ApiError(res.status, json);
  return json;
}

/** Every page of a list endpoint (`data` + `next_page`), up to `max` items. */
export async function listAll(path, query = {}, max = 10_000) {
  const items = [];
  let page;
  do {
    const res = await api(path, { query: { ...query, ...(page ? { page } : {}) } });
    items.push(...res.data);
    page = res.next_page;
  } while (page && items.length < max);
  return items;
}

/** Downloads a file's content (the key goes in a header, so a plain link cannot do it). */
export function download(fileId, filename) {
  return saveFrom(`/v1/files/${encodeURIComponent(fileId)}/content`, filename || fileId);
}

/** Fetches `path` with the key and hands the bytes to the browser as a download named `filename`. */
export async function saveFrom(path, filename) {
  const res = await fetch(path, { headers: headers() });
  if (!res.ok) throw new ApiError(res.status, await res.json().catch(() => null));
  const url = URL.createObjectURL(await res.blob());
  const a = document.createElement("a");
  a.href = url;
  a.download = filename;
  a.click();
  setTimeout(() => URL.revokeObjectURL(url), 1000);
}
