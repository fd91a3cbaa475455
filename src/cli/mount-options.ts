/**
 * `--mount type=bind,source=HOST,target=PATH[,readonly]` and `-v HOST:PATH[:ro|:rw]` for `run`
 * and `shell`, as Docker takes them (`src`/`dst`/`destination`, `ro`, `readonly=false`). Neither
 * says rw or ro: read-only unless the caller owns the source (see sandbox/bind-mounts.ts). A
 * relative HOST is taken from the current dir; a Docker named volume (a bare name) is refused.
 */
import { InvalidArgumentError } from 'commander';
import { resolve } from 'node:path';
import type { BindMount } from '../sandbox/bind-mounts.js';
import type { ArgParser } from './options.js';

const BOOL: Readonly<Record<string, boolean>> = { true: true, '1': true, false: false, '0': false };

/** One `--mount` value. */
export function parseMount(value: string, cwd = process.cwd()): BindMount {
  let source: string | undefined;
  let target: string | undefined;
  let readonly: boolean | undefined;
  for (const field of value.split(',')) {
    const eq = field.indexOf('=');
    const key = eq < 0 ? field : field.slice(0, eq);
    const v = eq < 0 ? undefined : field.slice(eq + 1);
    if (key === 'type') {
      if (v !== 'bind') throw new InvalidArgumentError(`only type=bind mounts exist here (a host path), not type=${v ?? ''}`);
    } else if (key === 'source' || key === 'src') source = v;
    else if (key === 'target' || key === 'dst' || key === 'destination') target = v;
    else if (key === 'readonly' || key === 'ro') {
      const b = v === undefined ? true : BOOL[v];
      if (b === undefined) throw new InvalidArgumentError(`${key}=${v}: use ${key}, ${key}=true or ${key}=false`);
      readonly = b;
    } else throw new InvalidArgumentError(`unknown field "${key}": use type=bind,source=HOST,target=PATH[,readonly]`);
  }
  if (source === undefined || source === '' || target === undefined || target === '')
    throw new InvalidArgumentError('needs source=HOST and target=PATH, e.g. type=bind,source=./data,target=/data,readonly');
  return { source: resolve(cwd, source), target, ...(readonly === undefined ? {} : { readonly }) };
}

/** One `-v` value: HOST:PATH, HOST:PATH:ro or HOST:PATH:rw. */
export function parseVolume(value: string, cwd = process.cwd()): BindMount {
  const parts = value.split(':');
  const [host, target, mode] = parts;
  if (parts.length < 2 || parts.length > 3 || host === '' || target === '' || host === undefined || target === undefined)
    throw new InvalidArgumentError('use HOST:PATH or HOST:PATH:ro (HOST a host path, PATH absolute in the sandbox)');
  if (!host.includes('/') && host !== '.' && host !== '..')
    throw new InvalidArgumentError(`"${host}" looks like a named volume: there are none here; give a host path (./${host} for one in this dir)`);
  if (mode !== undefined && mode !== 'ro' && mode !== 'rw') throw new InvalidArgumentError(`mode "${mode}": only ro and rw are known`);
  return { source: resolve(cwd, host), target, ...(mode === undefined ? {} : { readonly: mode === 'ro' }) };
}

/** commander parsers that collect every repeat of the option. */
export const mountOption = (): ArgParser<BindMount[]> => (value, previous) => [...(previous ?? []), parseMount(value)];
export const volumeOption = (): ArgParser<BindMount[]> => (value, previous) => [...(previous ?? []), parseVolume(value)];
