import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { InvalidInputError } from '../errors.js';
import { LocalRegistry } from './local.js';
import { openRegistry } from './open.js';
import { S3Registry } from './s3.js';
import { parseS3Url } from './s3-config.js';

describe('S3 registry URLs', () => {
  it('takes bucket and prefix from the URL and options from its query', () => {
    expect(parseS3Url('s3://my-bucket/envs/swe/?region=eu-west-1&path-style&endpoint=https://minio.example:9000', {})).toEqual({
      bucket: 'my-bucket',
      prefix: 'envs/swe',
      region: 'eu-west-1',
      endpoint: 'https://minio.example:9000',
      forcePathStyle: true,
    });
    expect(parseS3Url('s3://my-bucket', {})).toEqual({ bucket: 'my-bucket', prefix: '', forcePathStyle: false });
  });

  it('falls back to the standard AWS environment variables', () => {
    const env = { AWS_ENDPOINT_URL: 'https://s3.other.example', AWS_REGION: 'us-west-2', AWS_S3_FORCE_PATH_STYLE: '1' };
    expect(parseS3Url('s3://b-1/p', env)).toMatchObject({ endpoint: 'https://s3.other.example', region: 'us-west-2', forcePathStyle: true });
    expect(parseS3Url('s3://b-1/p', { ...env, AWS_ENDPOINT_URL_S3: 'https://s3-only.example' }).endpoint).toBe('https://s3-only.example');
    expect(parseS3Url('s3://b-1/p', { AWS_DEFAULT_REGION: 'ap-south-1' }).region).toBe('ap-south-1');
    expect(parseS3Url('s3://b-1/p?region=eu-north-1', env).region).toBe('eu-north-1');
    expect(parseS3Url('s3://b-1/p?path-style=0', env).forcePathStyle).toBe(false);
  });

  it('uses path-style addressing for IP and localhost endpoints, where bucket host names cannot resolve', () => {
    expect(parseS3Url('s3://b-1/p', { AWS_ENDPOINT_URL: 'http://127.0.0.1:9000' }).forcePathStyle).toBe(true);
    expect(parseS3Url('s3://b-1/p', { AWS_ENDPOINT_URL: 'http://localhost:9000' }).forcePathStyle).toBe(true);
    expect(parseS3Url('s3://b-1/p', { AWS_ENDPOINT_URL: 'https://s3.example.com' }).forcePathStyle).toBe(false);
  });

  it('rejects malformed locations with a typed error', () => {
    for (const bad of ['s3://', 's3://UPPER/x', 's3://b-1/a/../b', 'http://b-1/x', 's3://b-1/p?endpoint=not a url']) {
      expect(() => parseS3Url(bad, {}), bad).toThrow(InvalidInputError);
    }
  });

  it('opens S3 for s3:// and a directory for a path, and refuses other schemes', async () => {
    const s3 = openRegistry('s3://bucket-x/pre?region=us-east-1&endpoint=http://127.0.0.1:1');
    expect(s3).toBeInstanceOf(S3Registry);
    expect(s3.url).toBe('s3://bucket-x/pre');
    (s3 as S3Registry).close();
    const dir = await mkdtemp(join(tmpdir(), 'open-'));
    try {
      expect(openRegistry(dir)).toBeInstanceOf(LocalRegistry);
      expect(openRegistry(`file://${dir}`).url).toBe(dir);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
    expect(() => openRegistry('gs://bucket/x')).toThrow(InvalidInputError);
  });
});
