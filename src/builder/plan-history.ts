/**
 * Shared history (side effect: asks git). For each repository, the merge base of every base
 * commit the whole dataset names for it (the history layer every instance stacks on), and the
 * segments of history after it (see InstanceRecipe.history.segments): computed over the whole
 * dataset, not a shard or a selection, so every shard and every rerun puts the same history in
 * the same layers (it is part of their keys). Only local sources are asked; a repository whose
 * commits share no history, or that is remote, gets no shared store.
 */
import type { LocatedRow } from '../dataset/row.js';
import type { RepoSource } from '../recipe/schema.js';
import { runGit } from '../util/git.js';

export interface HistorySegment {
  commit: string;
  /** Its nearest ancestors among the dataset's commits, or the history base when it has none. */
  after: string[];
}

export interface RepoHistory {
  base: string;
  /** Per dataset commit: the segments an instance at that commit holds, oldest first (empty at the base itself). */
  segments: Map<string, HistorySegment[]>;
}

/**
 * Pure: segments from the commit graph after the base. `graph`: `commit parent...` lines of every
 * commit reachable from a dataset commit and not from the base, parents before children (as
 * `git rev-list --topo-order --reverse --parents` prints them); `commits`: the dataset's commits.
 */
export function historySegments(base: string, commits: readonly string[], graph: readonly string[]): Map<string, HistorySegment[]> {
  const wanted = [...new Set(commits)].filter((c) => c !== base);
  const bit = new Map(wanted.map((c, i) => [c, 1n << BigInt(i)]));
  // reach: the dataset commits at or below a commit; strict: below a dataset commit (its ancestors among them).
  const reach = new Map<string, bigint>();
  const strict = new Map<string, bigint>();
  const order: string[] = [];
  for (const line of graph) {
    const [c, ...parents] = line.split(' ').filter((x) => x !== '');
    if (c === undefined) continue;
    let r = 0n;
    for (const p of parents) r |= reach.get(p) ?? 0n;
    const b = bit.get(c);
    if (b !== undefined) {
      strict.set(c, r);
      order.push(c);
      r |= b;
    }
    reach.set(c, r);
  }
  const members = (set: bigint): string[] => order.filter((c) => (set & bit.get(c)!) !== 0n);
  const segmentOf = new Map<string, HistorySegment>();
  for (const c of order) {
    const below = strict.get(c)!;
    let covered = 0n;
    for (const a of members(below)) covered |= strict.get(a)!;
    const nearest = members(below & ~covered);
    segmentOf.set(c, { commit: c, after: nearest.length > 0 ? nearest : [base] });
  }
  const out = new Map<string, HistorySegment[]>([[base, []]]);
  for (const c of order)
    out.set(
      c,
      [...members(strict.get(c)!), c].map((x) => segmentOf.get(x)!),
    );
  return out;
}

export async function computeRepoHistories(rows: readonly LocatedRow[], repoSource: (repo: string) => RepoSource): Promise<Map<string, RepoHistory>> {
  const commits = new Map<string, Set<string>>();
  for (const { row } of rows) {
    const set = commits.get(row.repo) ?? new Set<string>();
    set.add(row.base_commit);
    commits.set(row.repo, set);
  }
  const out = new Map<string, RepoHistory>();
  for (const [repo, set] of commits) {
    const src = repoSource(repo);
    if ('url' in src) continue;
    const dir = 'path' in src ? src.path : src.mirror;
    const sorted = [...set].sort();
    const r = await runGit(['-C', dir, 'merge-base', '--octopus', ...sorted]);
    const base = r.stdout.trim();
    // A missing repository or commit is preflightRepos' to report; here it only means "no sharing".
    if (r.exitCode !== 0 || !/^[0-9a-f]{40,64}$/.test(base)) continue;
    const g = await runGit(['-C', dir, 'rev-list', '--topo-order', '--reverse', '--parents', ...sorted, `^${base}`]);
    if (g.exitCode !== 0) continue;
    out.set(repo, { base, segments: historySegments(base, sorted, g.stdout.split('\n')) });
  }
  return out;
}

export async function computeHistoryBases(rows: readonly LocatedRow[], repoSource: (repo: string) => RepoSource): Promise<Map<string, string>> {
  return new Map([...(await computeRepoHistories(rows, repoSource))].map(([repo, h]) => [repo, h.base]));
}

/** Where an instance sandbox sees the shared history store of `owner/name`. */
export function historyPath(repo: string): string {
  return `/opt/minisandbox/history/${repo}.git`;
}
