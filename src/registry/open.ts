/**
 * One registry from one string: `s3://bucket/prefix[?...]` is S3 (see s3-config.ts for the
 * options and the AWS settings it reads), anything else is a local directory path.
 */
import { InvalidInputError } from '../errors.js';
import { LocalRegistry } from './local.js';
import type { Registry } from './registry.js';
import { S3Registry, type S3RegistryOptions } from './s3.js';

export function openRegistry(url: string, s3Options: S3RegistryOptions = {}): Registry {
  if (url.startsWith('s3://')) return new S3Registry(url, s3Options);
  // A scheme we do not speak must not silently become a relative directory named `gs:`.
  if (/^[a-z][a-z0-9+.-]*:\/\//i.test(url) && !url.startsWith('file://'))
    throw new InvalidInputError(`unsupported registry URL ${JSON.stringify(url)}`, 'use a directory path or s3://bucket/prefix');
  if (url === '') throw new InvalidInputError('empty registry location', 'use a directory path or s3://bucket/prefix');
  return new LocalRegistry(url.startsWith('file://') ? new URL(url).pathname : url);
}
