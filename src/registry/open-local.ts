/**
 * A registry location that is not S3: a local directory path (or file:// URL). Apart from
 * open.ts, so that a command on a local registry does not load the S3 client's code.
 */
import { InvalidInputError } from '../errors.js';
import { LocalRegistry } from './local.js';

export function openLocalRegistry(url: string): LocalRegistry {
  // A scheme we do not speak must not silently become a relative directory named `gs:`.
  if (/^[a-z][a-z0-9+.-]*:\/\//i.test(url) && !url.startsWith('file://'))
    throw new InvalidInputError(`unsupported registry URL ${JSON.stringify(url)}`, 'use a directory path or s3://bucket/prefix');
  if (url === '') throw new InvalidInputError('empty registry location', 'use a directory path or s3://bucket/prefix');
  return new LocalRegistry(url.startsWith('file://') ? new URL(url).pathname : url);
}
