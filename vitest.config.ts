import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['src/**/*.test.ts', 'test/**/*.test.ts'],
    // Timeouts are safety nets against hangs, not measurements: on a host whose load average is 8,
    // tests run several times slower than on an idle one, and no assertion may depend on speed.
    testTimeout: 300_000,
    hookTimeout: 300_000,
    // Sandboxes, mounts and debootstrap are heavy; two cores only.
    maxWorkers: 2,
    pool: 'forks',
  },
});
