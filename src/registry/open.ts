/**
 * One registry from one string: `s3://bucket/prefix[?...]` is S3 (see s3-config.ts for the
 * options and the AWS settings it reads), anything else is a local directory path (open-local.ts).
 */
import { openLocalRegistry } from './open-local.js';
import type { Registry } from './registry.js';
import { S3Registry, type S3RegistryOptions } from './s3.js';

export function openRegistry(url: string, s3Options: S3RegistryOptions = {}): Registry {
  if (url.startsWith('s3://')) return new S3Registry(url, s3Options);
  return openLocalRegistry(url);
}
