/**
 * The Prometheus implementation of the metrics port, on `prom-client`, with
 * its own registry (never the library's global one, so two servers in one
 * test process do not share series) plus the process's default metrics.
 */
import { Counter, collectDefaultMetrics, Gauge, Histogram, Registry } from "prom-client";
import type { MetricsPort } from "./port.ts";

/**
 * How often the event loop lag series (`openma_nodejs_eventloop_lag_*`)
 * sample the loop. prom-client's default, 10 ms, wakes an idle server 100
 * times a second: 5-6 ms of CPU per second on the bench machine, which was
 * most of what metrics cost a lightly loaded server (docs/benchmarks.md,
 * "Operations overhead"). At 100 ms the series keep their meaning (the delay
 * of a timer due then) from a tenth of the samples, for 0.6 ms/s.
 */
const EVENT_LOOP_SAMPLE_MS = 100;

export interface PrometheusMetrics {
  port: MetricsPort;
  /** The exposition text and its content type, for `GET /metrics`. */
  scrape(): Promise<{ contentType: string; body: string }>;
}

export function prometheusMetrics(options: { defaultMetrics?: boolean } = {}): PrometheusMetrics {
  const registry = new Registry();
  if (options.defaultMetrics ?? true)
    collectDefaultMetrics({ register: registry, prefix: "openma_", eventLoopMonitoringPrecision: EVENT_LOOP_SAMPLE_MS });
  const port: MetricsPort = {
    counter: (def) => {
      const c = new Counter({ name: def.name, help: def.help, labelNames: [...(def.labelNames ?? [])], registers: [registry] });
      return { inc: (labels = {}, value = 1) => c.inc(labels, value) };
    },
    histogram: (def) => {
      const h = new Histogram({
        name: def.name,
        help: def.help,
        labelNames: [...(def.labelNames ?? [])],
        ...(def.buckets ? { buckets: [...def.buckets] } : {}),
        registers: [registry],
      });
      return { observe: (labels, value) => h.observe(labels, value) };
    },
    gauge: (def) => {
      const collect = def.collect;
      const g: Gauge = new Gauge({
        name: def.name,
        help: def.help,
        labelNames: [...(def.labelNames ?? [])],
        registers: [registry],
        ...(collect
          ? {
              async collect() {
                const samples = await collect();
                g.reset();
                for (const s of samples) g.set(s.labels, s.value);
              },
            }
          : {}),
      });
      return {
        inc: (labels = {}, value = 1) => g.inc(labels, value),
        dec: (labels = {}, value = 1) => g.dec(labels, value),
        set: (labels, value) => g.set(labels, value),
      };
    },
  };
  return {
    port,
    scrape: async () => ({ contentType: registry.contentType, body: await registry.metrics() }),
  };
}
