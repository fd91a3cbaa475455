import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['src/**/*.test.ts', 'test/**/*.test.ts'],
    testTimeout: 60_000,
    hookTimeout: 300_000,
    // Sandboxes, mounts and debootstrap are heavy; two cores only.
    maxWorkers: 2,
    pool: 'forks',
  },
});
