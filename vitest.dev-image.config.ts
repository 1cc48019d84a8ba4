import { defineConfig } from "vitest/config";

/**
 * The dev toolchain image is opt-in (`OPENMA_DEV_IMAGE=1 npm run provision`: several minutes more of
 * debootstrap), so its checks stay out of `npm test`. `npm run test:integration:dev-image` runs them.
 */
export default defineConfig({
  test: {
    include: ["test/images/**/*.image-e2e.ts"],
    testTimeout: 120_000,
    hookTimeout: 120_000,
    pool: "forks",
  },
});
