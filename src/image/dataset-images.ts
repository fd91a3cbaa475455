/**
 * Datasets whose environments are container images (SWE-bench publishes one per instance):
 * the image named for each row, and importing a whole dataset's images with a bounded number at
 * once, each tagged `<dataset>/<instance_id>` as a built instance would be.
 *
 * Templates: `{id}` is SWE-bench's image name for the instance (lowercased, `__` written
 * `_1776_`, as its harness names `swebench/sweb.eval.x86_64.{id}:latest`), `{owner}` (or
 * `{org}`) and `{name}` the two parts of the repo, and any other `{field}` the row's own string or
 * number field (`{instance_id}`, `{repo}`, `{version}`, Multi-SWE-bench's `{number}`, SWE-smith's
 * `{image_name}`); `{field|lower}` lowercases it. The public per-task images of the multilingual
 * datasets are then, for SWE-bench Multilingual `swebench/sweb.eval.x86_64.{id}:latest`, for
 * Multi-SWE-bench `mswebench/{org|lower}_m_{name|lower}:pr-{number}` and for SWE-smith
 * `{image_name}`. A source without a transport is a registry image (`docker://` is implied, as
 * podman does).
 */
import type { Registry } from '../registry/registry.js';
import { loadCatalog } from '../store/catalog.js';
import type { StorePaths } from '../store/paths.js';
import { errorMessage, InvalidInputError, MinisandboxError } from '../errors.js';
import { importImage, type ImportImageOptions } from './import.js';
import { isImageSource } from './reference.js';

export interface ImageRow {
  instance_id: string;
  repo: string;
  version: string;
  [field: string]: unknown;
}

/** SWE-bench's spelling of an instance id in image names. */
export function swebenchImageId(instanceId: string): string {
  return instanceId.toLowerCase().replaceAll('__', '_1776_');
}

function templateValue(row: ImageRow, field: string): string | undefined {
  const [owner, name] = row.repo.split('/');
  if (field === 'id') return swebenchImageId(row.instance_id);
  if (field === 'owner' || (field === 'org' && typeof row.org !== 'string')) return owner;
  if (field === 'name') return name;
  const v = row[field];
  return typeof v === 'string' || typeof v === 'number' ? String(v) : undefined;
}

/** The image source `template` names for `row`; a placeholder the row has no value for is an error naming it. */
export function imageForRow(template: string, row: ImageRow): string {
  const s = template.replace(/\{([A-Za-z_][A-Za-z0-9_]*)(\|lower)?\}/g, (_placeholder, field: string, lower: string | undefined) => {
    const v = templateValue(row, field);
    if (v === undefined)
      throw new InvalidInputError(
        `instance ${row.instance_id}: image template ${JSON.stringify(template)} names {${field}}, which the row has no value for`,
        'use {id}, {owner}, {name} or a string or number field of the row',
      );
    return lower === undefined ? v : v.toLowerCase();
  });
  return isImageSource(s) ? s : `docker://${s}`;
}

export interface DatasetImageItem {
  instanceId: string;
  source: string;
  tag: string;
}

export interface DatasetImageResult {
  id: string;
  kind: 'image';
  label: string;
  status: 'built' | 'cached' | 'failed' | 'skipped';
  durationMs: number;
  env?: string;
  tag?: string;
  error?: string;
  source: string;
  fetchedBytes?: number;
}

export interface DatasetImageOptions extends Omit<ImportImageOptions, 'tag' | 'onProgress'> {
  /** Images imported at once (each also downloads up to `jobs` layers at once). */
  parallel?: number;
  keepGoing?: boolean;
  /** Import again even when the instance's tag exists. */
  force?: boolean;
  signal?: AbortSignal;
  onDone?: (r: DatasetImageResult, done: number, total: number) => void;
}

/**
 * Imports every item's image and tags it. A tag already present is `cached` (not even the
 * manifest is fetched) unless `force`; an image converted before under another tag costs one
 * manifest and config fetch. Without `keepGoing` the first failure skips what has not started.
 */
export async function importDatasetImages(
  reg: Registry,
  store: StorePaths,
  items: readonly DatasetImageItem[],
  opts: DatasetImageOptions = {},
): Promise<DatasetImageResult[]> {
  const results: DatasetImageResult[] = new Array(items.length);
  let next = 0;
  let done = 0;
  let stop = false;
  // one catalog for the whole dataset: loaded once, not per image
  // conversions add the packs they publish to it, so it stays current without reloading
  let catalogP: ReturnType<typeof loadCatalog> | undefined;
  const catalog = (): ReturnType<typeof loadCatalog> => (catalogP ??= loadCatalog(reg, store));
  const worker = async (): Promise<void> => {
    for (;;) {
      const i = next++;
      if (i >= items.length) return;
      const it = items[i]!;
      const base = { id: `image:${it.instanceId}`, kind: 'image' as const, label: it.instanceId, source: it.source, tag: it.tag };
      const t0 = performance.now();
      let r: DatasetImageResult;
      if (stop || opts.signal?.aborted === true) r = { ...base, status: 'skipped', durationMs: 0 };
      else {
        try {
          const existing = opts.force === true ? null : await reg.getRef(it.tag);
          if (existing !== null) r = { ...base, status: 'cached', durationMs: 0, env: existing };
          else {
            const out = await importImage(reg, store, it.source, { ...opts, tag: it.tag, catalog });
            r = {
              ...base,
              status: out.status === 'present' ? 'cached' : 'built',
              durationMs: Math.round(performance.now() - t0),
              env: out.env,
              fetchedBytes: out.fetchedBytes,
            };
          }
        } catch (e) {
          if (opts.keepGoing !== true) stop = true;
          const hint = e instanceof MinisandboxError && e.hint !== undefined ? ` (${e.hint})` : '';
          r = { ...base, status: 'failed', durationMs: Math.round(performance.now() - t0), error: `${errorMessage(e)}${hint}` };
        }
      }
      results[i] = r;
      opts.onDone?.(r, ++done, items.length);
    }
  };
  await Promise.all(Array.from({ length: Math.max(1, Math.min(opts.parallel ?? 1, items.length)) }, () => worker()));
  return results;
}
