/**
 * The runtime coverage lane (`npm run test:coverage:runtime`): every test of
 * the contract and host packages, with 100% line, branch, function and
 * statement coverage of both enforced. Falling below fails the command.
 */
import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    include: ["packages/contract/src/**/*.test.ts", "packages/host/src/**/*.test.ts"],
    testTimeout: 60_000,
    hookTimeout: 60_000,
    pool: "forks",
    coverage: {
      provider: "v8",
      include: ["packages/contract/src/**/*.ts", "packages/host/src/**/*.ts"],
      exclude: ["**/*.test.ts"],
      reporter: ["text"],
      reportsDirectory: "coverage/runtime",
      thresholds: { lines: 100, branches: 100, functions: 100, statements: 100 },
    },
  },
});
