import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    include: ["packages/**/src/**/*.test.ts", "apps/**/src/**/*.test.ts", "test/**/*.test.ts"],
    testTimeout: 60_000,
    hookTimeout: 60_000,
    pool: "forks",
    // Vitest's default on a 2-CPU machine is one file at a time. Most files spend their time waiting on
    // child processes (servers, sandboxes, containers, stand-ins), so two at once keep both CPUs busy.
    // Files never share state: each uses its own database schema, deployment id, data dir and ports.
    maxWorkers: 2,
  },
});
