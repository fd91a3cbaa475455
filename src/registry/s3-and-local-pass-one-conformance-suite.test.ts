import { randomBytes } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll } from 'vitest';
import { registryConformance } from '../../test/s3/registry-conformance.js';
import { type S3TestServer, startS3Server } from '../../test/s3/server.js';
import { LocalRegistry } from './local.js';
import { S3Registry } from './s3.js';

const MiB = 1024 * 1024;
let server: S3TestServer;
beforeAll(async () => {
  server = await startS3Server();
});
afterAll(async () => {
  await server?.stop();
});

registryConformance('S3 (s3rver)', {
  fresh: async () => {
    // A fresh prefix per test: the same bucket, nothing shared.
    const registry = new S3Registry(`s3://${server.bucket}/t-${randomBytes(6).toString('hex')}`, {
      endpoint: server.endpoint,
      region: server.region,
      credentials: server.credentials,
      partSize: 5 * MiB,
      listPageSize: 7,
    });
    return { registry, cleanup: async () => registry.close() };
  },
  largeBlobSize: 11 * MiB + 123,
  listCount: 30,
});

registryConformance('local directory', {
  fresh: async () => {
    const dir = await mkdtemp(join(tmpdir(), 'local-registry-'));
    return { registry: new LocalRegistry(dir), cleanup: () => rm(dir, { recursive: true, force: true }) };
  },
  largeBlobSize: 11 * MiB + 123,
  listCount: 30,
});
