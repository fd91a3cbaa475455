/**
 * Before building anything: does every instance's repository exist locally and hold its base
 * commit? One `git cat-file --batch-check` per repository answers for all its instances, so a
 * missing commit is reported up front, naming the dataset line, instead of hours into a build.
 * Remote (URL) sources are not checked here; the checkout reports them.
 */
import { access } from 'node:fs/promises';
import { repoSourceLocation } from '../recipe/checkout.js';
import { runGit } from '../util/git.js';
import type { BuildPlan } from './plan.js';

export interface PreflightProblem {
  /** The instance node's id. */
  id: string;
  /** Dataset location (`file:line`) and what is wrong. */
  message: string;
}

export async function preflightRepos(plan: BuildPlan): Promise<PreflightProblem[]> {
  const byRepo = new Map<string, Array<{ id: string; where: string; commit: string }>>();
  for (const n of plan.nodes) {
    if (n.recipe.kind !== 'instance' || 'url' in n.recipe.repo) continue;
    const loc = repoSourceLocation(n.recipe.repo);
    const list = byRepo.get(loc) ?? [];
    list.push({ id: n.id, where: n.source, commit: n.recipe.commit });
    byRepo.set(loc, list);
  }
  const problems: PreflightProblem[] = [];
  for (const [repo, items] of byRepo) {
    const missingRepo = await access(repo).then(
      () => false,
      () => true,
    );
    if (missingRepo) {
      for (const i of items)
        problems.push({ id: i.id, message: `${i.where}: repository ${repo} does not exist (make a mirror: git clone --mirror <url> ${repo})` });
      continue;
    }
    const r = await runGit(['-C', repo, 'cat-file', '--batch-check'], { input: `${items.map((i) => `${i.commit}^{commit}`).join('\n')}\n` });
    if (r.exitCode !== 0) {
      for (const i of items) problems.push({ id: i.id, message: `${i.where}: ${repo} is not a git repository (${r.stderr.trim() || r.message})` });
      continue;
    }
    const answers = r.stdout.split('\n');
    items.forEach((i, k) => {
      if (!/ commit \d+$/.test(answers[k] ?? ''))
        problems.push({ id: i.id, message: `${i.where}: commit ${i.commit} not found in ${repo} (update the mirror with git fetch, or fix base_commit)` });
    });
  }
  return problems;
}
