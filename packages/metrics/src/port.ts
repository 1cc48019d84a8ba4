/**
 * The metrics port: what instrumented code sees. Packages take a
 * `MetricsPort` (default `noopMetrics`) so they stay testable and never
 * import a metrics library; `openma serve` passes the Prometheus one
 * (`@openma/metrics/prometheus`).
 *
 * Label values must come from small fixed sets (a route pattern, a driver
 * name, an outcome): never a session id, a path or any other caller input,
 * or the series count grows without bound.
 */
export type Labels = Readonly<Record<string, string>>;

export interface Counter {
  inc(labels?: Labels, value?: number): void;
}

export interface Histogram {
  observe(labels: Labels, value: number): void;
}

export interface Gauge {
  inc(labels?: Labels, value?: number): void;
  dec(labels?: Labels, value?: number): void;
  set(labels: Labels, value: number): void;
}

export interface Sample {
  labels: Labels;
  value: number;
}

export interface MetricDefinition {
  /** Prometheus conventions: `openma_` prefix, base units (seconds, bytes), `_total` for counters. */
  name: string;
  help: string;
  labelNames?: readonly string[];
}

export interface HistogramDefinition extends MetricDefinition {
  /** Upper bounds in the metric's unit; default: the library's. */
  buckets?: readonly number[];
}

export interface GaugeDefinition extends MetricDefinition {
  /** Read at scrape time (queue depth from the database, say) instead of being set as things happen. */
  collect?: () => Promise<readonly Sample[]>;
}

export interface MetricsPort {
  counter(def: MetricDefinition): Counter;
  histogram(def: HistogramDefinition): Histogram;
  gauge(def: GaugeDefinition): Gauge;
}

const nothing = { inc() {}, dec() {}, set() {}, observe() {} };

/** Records nothing: the default wherever metrics are optional. */
export const noopMetrics: MetricsPort = {
  counter: () => nothing,
  histogram: () => nothing,
  gauge: () => nothing,
};
