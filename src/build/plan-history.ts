/**
 * Shared history bases (side effect: asks git): for each repository, the merge base of every base
 * commit the whole dataset names for it. Computed over the whole dataset, not a shard, so every
 * shard and every rerun puts the same history store in the same instance layers (it is part of
 * their keys). Only local sources are asked; a repository whose commits share no history, or that
 * is remote, gets no shared store.
 */
import type { LocatedRow } from '../dataset/row.js';
import type { RepoSource } from '../recipe/schema.js';
import { runGit } from '../util/git.js';

export async function computeHistoryBases(rows: readonly LocatedRow[], repoSource: (repo: string) => RepoSource): Promise<Map<string, string>> {
  const commits = new Map<string, Set<string>>();
  for (const { row } of rows) {
    const set = commits.get(row.repo) ?? new Set<string>();
    set.add(row.base_commit);
    commits.set(row.repo, set);
  }
  const bases = new Map<string, string>();
  for (const [repo, set] of commits) {
    const src = repoSource(repo);
    if ('url' in src) continue;
    const dir = 'path' in src ? src.path : src.mirror;
    const r = await runGit(['-C', dir, 'merge-base', '--octopus', ...[...set].sort()]);
    const base = r.stdout.trim();
    // A missing repository or commit is preflightRepos' to report; here it only means "no sharing".
    if (r.exitCode === 0 && /^[0-9a-f]{40,64}$/.test(base)) bases.set(repo, base);
  }
  return bases;
}

/** Where an instance sandbox sees the shared history store of `owner/name`. */
export function historyPath(repo: string): string {
  return `/opt/minisandbox/history/${repo}.git`;
}
