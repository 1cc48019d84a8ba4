import { describe, expect, it } from "vitest";
import { openmaMetrics } from "./catalogue.ts";
import { prometheusMetrics } from "./prometheus.ts";

describe("prometheusMetrics", () => {
  it("exposes the catalogue's series, with collected gauges read at scrape time", async () => {
    const prom = prometheusMetrics({ defaultMetrics: false });
    let pending = 2;
    const m = openmaMetrics(prom.port, {
      executionQueue: async () => ({ byState: { pending, running: 1 }, oldestPendingAgeSeconds: 4.5, oldestClaimAgeSeconds: 1 }),
      orphans: async () => ({ dead_letter: 3 }),
    });
    m.httpRequests.inc({ method: "GET", route: "/v1/sessions/:id", status: "200" });
    m.modelTokens.inc({ type: "output" }, 7);
    m.turnsRunning.inc();
    const first = (await prom.scrape()).body;
    expect(first).toContain('openma_http_requests_total{method="GET",route="/v1/sessions/:id",status="200"} 1');
    expect(first).toContain('openma_model_tokens_total{type="output"} 7');
    expect(first).toContain("openma_turns_running 1");
    expect(first).toContain('openma_execution_queue_sessions{state="pending"} 2');
    expect(first).toContain("openma_execution_oldest_pending_age_seconds 4.5");
    expect(first).toContain('openma_runtime_orphans{state="dead_letter"} 3');
    pending = 0;
    expect((await prom.scrape()).body).toContain('openma_execution_queue_sessions{state="pending"} 0');
  });

  it("keeps two registries apart and includes the process metrics by default", async () => {
    const a = prometheusMetrics();
    const b = prometheusMetrics({ defaultMetrics: false });
    openmaMetrics(a.port).turnsRunning.inc();
    openmaMetrics(b.port);
    const withDefaults = (await a.scrape()).body;
    expect(withDefaults).toContain("openma_process_cpu_seconds_total");
    // Sampled every 100 ms (prometheus.ts), still exposed.
    expect(withDefaults).toContain("openma_nodejs_eventloop_lag_p99_seconds");
    expect((await b.scrape()).body).toContain("openma_turns_running 0");
  });
});
