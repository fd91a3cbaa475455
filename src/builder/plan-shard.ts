/**
 * `--shard I/N`: a deterministic split of a dataset's instances across N machines (0-based I,
 * as a Kubernetes Indexed Job's JOB_COMPLETION_INDEX). Instances are ordered by (repo, version,
 * instance_id) and cut into N contiguous, near-equal runs, so instances that share an env mostly
 * land on one shard and each env is built by as few shards as possible. An env that straddles a
 * cut is built by both; identical cache keys make that race harmless.
 */
import { InvalidInputError } from '../errors.js';

export interface Shard {
  index: number;
  count: number;
}

export const WHOLE: Shard = { index: 0, count: 1 };

export function parseShard(s: string): Shard {
  const m = /^(\d+)\/(\d+)$/.exec(s.trim());
  const index = m ? Number(m[1]) : NaN;
  const count = m ? Number(m[2]) : NaN;
  if (!m || count < 1 || index >= count) {
    throw new InvalidInputError(
      `invalid shard ${JSON.stringify(s)}`,
      'use --shard I/N with 0 <= I < N, e.g. --shard 0/4 (I is 0-based, like JOB_COMPLETION_INDEX)',
    );
  }
  return { index, count };
}

export interface Shardable {
  instance_id: string;
  repo: string;
  version: string;
}

function compareRows(a: Shardable, b: Shardable): number {
  const cmp = (x: string, y: string): number => (x < y ? -1 : x > y ? 1 : 0);
  return cmp(a.repo, b.repo) || cmp(a.version, b.version) || cmp(a.instance_id, b.instance_id);
}

/** The items of shard `shard`, in (repo, version, instance_id) order. */
export function selectShard<T>(items: readonly T[], shard: Shard, row: (t: T) => Shardable): T[] {
  const sorted = [...items].sort((a, b) => compareRows(row(a), row(b)));
  const start = Math.floor((shard.index * sorted.length) / shard.count);
  const end = Math.floor(((shard.index + 1) * sorted.length) / shard.count);
  return sorted.slice(start, end);
}
