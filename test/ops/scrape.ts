/** Reads Prometheus exposition text in tests. */

/** Every series of `name`: its labels and value. */
function series(body: string, name: string): Array<{ labels: Map<string, string>; value: number }> {
  const found: Array<{ labels: Map<string, string>; value: number }> = [];
  for (const line of body.split("\n")) {
    const match = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$/.exec(line);
    if (!match || match[1] !== name) continue;
    const labels = new Map([...(match[2] ?? "").matchAll(/([a-zA-Z_]+)="((?:[^"\\]|\\.)*)"/g)].map((m) => [m[1] ?? "", m[2] ?? ""]));
    found.push({ labels, value: Number(match[3]) });
  }
  return found;
}

/** The value of the series with exactly these labels (0 when absent, as Prometheus treats a missing counter). */
export function sample(body: string, name: string, labels: Record<string, string> = {}): number {
  const want = Object.entries(labels);
  const hit = series(body, name).find((s) => s.labels.size === want.length && want.every(([k, v]) => s.labels.get(k) === v));
  return hit?.value ?? 0;
}

/** The sum of the series whose labels include these (whatever else they carry). */
export function total(body: string, name: string, labels: Record<string, string> = {}): number {
  const want = Object.entries(labels);
  return series(body, name)
    .filter((s) => want.every(([k, v]) => s.labels.get(k) === v))
    .reduce((sum, s) => sum + s.value, 0);
}

/** GET /metrics with a Bearer credential (the admin key or the scrape token). */
export async function scrape(baseURL: string, credential: string): Promise<string> {
  const res = await fetch(`${baseURL}/metrics`, { headers: { authorization: `Bearer ${credential}` } });
  if (res.status !== 200) throw new Error(`/metrics answered ${res.status}: ${await res.text()}`);
  return res.text();
}
