/**
 * Checks a repository out at one commit so that nothing after that commit is reachable: the fix
 * an instance asks for must not be readable from the future ("open-book" rewards).
 *
 * How: a fresh repository (no clone, so no remotes, no tags, no other branches) fetches exactly
 * the wanted commit, which transfers only that commit's ancestry (nothing unreachable, so nothing
 * to prune); a single branch points at it; FETCH_HEAD/ORIG_HEAD, reflogs and sample hooks are
 * removed. With a shared history (a dataset build), the objects up to the dataset's merge base
 * come from the history layer below (alternates) and those after it from one pack per dataset
 * commit among its ancestors (checkoutInstance), every one of them reachable from the commit.
 */
import { createHash } from 'node:crypto';
import { copyFile, cp, link, mkdir, mkdtemp, readdir, readFile, rename, rm, writeFile } from 'node:fs/promises';
import { basename, dirname, join } from 'node:path';
import { InvalidInputError, MinisandboxError, NotFoundError } from '../errors.js';
import { isErrno } from '../util/fs.js';
import { runGit } from '../util/git.js';
import type { HistoryRecipe, InstanceRecipe, RepoSource } from './schema.js';

export interface CheckoutOptions {
  /** A local working repository, a bare mirror, or a URL git can fetch from. */
  source: RepoSource;
  commit: string;
  /** Must not exist or be empty; becomes the work tree (e.g. `<layer root>/testbed`). */
  target: string;
  /** Branch that points at the commit (default `main`). */
  branch?: string;
  /**
   * Borrow objects from a shared history store (see makeSharedHistory) instead of copying them:
   * `objects` is its objects directory as seen now; `objectsAtRuntime` where the sandbox will see
   * it (e.g. in a lower layer), written into the checkout's alternates at the end.
   */
  sharedHistory?: { objects: string; objectsAtRuntime?: string };
}

export class GitError extends MinisandboxError {
  constructor(message: string, hint: string) {
    super('GIT_FAILED', message, { hint });
  }
}

export function repoSourceLocation(s: RepoSource): string {
  return 'path' in s ? s.path : 'mirror' in s ? s.mirror : s.url;
}

async function git(args: string[], cwd?: string): Promise<string> {
  const r = await runGit(args, cwd === undefined ? {} : { cwd });
  if (r.exitCode === 0) return r.stdout;
  throw new GitError(
    `git ${args[0] ?? ''} failed (${r.exitCode ?? 'spawn error'}): ${r.stderr.trim() || r.message}`,
    'is git installed and the repository readable? the full git error is above',
  );
}

async function ensureEmptyDir(dir: string): Promise<void> {
  try {
    if ((await readdir(dir)).length > 0) throw new InvalidInputError(`checkout target ${dir} is not empty`, 'check out into a fresh directory');
  } catch (e) {
    if (!isErrno(e, 'ENOENT')) throw e;
    await mkdir(dir, { recursive: true });
  }
}

/**
 * Fetches exactly `commit` (and so its ancestry only) from `from` into `refs/heads/<branch>` of `repo`.
 * `deterministic`: the source packs with one thread, so the same source gives the same pack bytes
 * (threaded delta search may pick other deltas on each run).
 */
async function fetchCommit(repo: string, from: string, commit: string, branch: string, deterministic = false): Promise<void> {
  // Protocol v2 serves any reachable commit; the v0 fallback needs allowAnySHA1InWant, and a source
  // owned by another user needs safe.directory. Both apply to a local upload-pack only.
  const uploadPack = `git -c uploadpack.allowAnySHA1InWant=true -c safe.directory='*'${deterministic ? ' -c pack.threads=1' : ''} upload-pack`;
  try {
    await git([
      '-C',
      repo,
      'fetch',
      '-q',
      '--no-tags',
      '--no-write-fetch-head',
      '--update-head-ok',
      // a shallow source's boundary comes along (markShallow then pins exactly which)
      '--update-shallow',
      '--upload-pack',
      uploadPack,
      from,
      `${commit}:refs/heads/${branch}`,
    ]);
  } catch (e) {
    if (e instanceof GitError && /not our ref|couldn't find remote ref|no such remote ref|unadvertised object|bad object/i.test(e.message)) {
      throw new NotFoundError(
        `commit ${commit} in ${from}`,
        'the dataset names a commit the repository does not have: update the mirror (`git fetch`) or fix base_commit',
      );
    }
    throw e;
  }
}

/**
 * Drops reflogs and whatever is unreachable, and repacks (only local objects: `gc` repacks with -l),
 * with one thread so that the same objects give the same pack bytes.
 */
async function scrub(gitDir: string): Promise<void> {
  await git(['--git-dir', gitDir, 'reflog', 'expire', '--expire=now', '--all']);
  await git(['--git-dir', gitDir, '-c', 'pack.threads=1', 'gc', '-q', '--prune=now']);
  for (const f of ['ORIG_HEAD', 'FETCH_HEAD', 'logs', 'hooks']) await rm(join(gitDir, f), { recursive: true, force: true });
}

/**
 * What a fresh checkout needs instead of scrub: it fetched one commit into an empty repository,
 * which transfers only objects reachable from that commit, so nothing is unreachable and there is
 * nothing to repack. `gc` here walked every object of the whole history (its repack, prune and
 * commit-graph enumerate all reachable objects, alternates' included): tens of seconds on a
 * Django-sized history for nothing.
 */
async function scrubFresh(gitDir: string): Promise<void> {
  for (const f of ['ORIG_HEAD', 'FETCH_HEAD', 'logs', 'hooks']) await rm(join(gitDir, f), { recursive: true, force: true });
}

/**
 * Where a shallow source's history ends below `commit`: its shallow commits that are `commit` or
 * an ancestor of it (sorted); empty for a source with all of its history. A repository built from
 * such a source lists them as its own shallow boundary, or git stops at their missing parents
 * ("Failed to traverse parents"). Commits of other lines are left out: not even their ids leak.
 */
async function shallowBoundary(source: RepoSource, commit: string): Promise<string[]> {
  if ('url' in source) return [];
  const from = repoSourceLocation(source);
  const path = await runGit(['-C', from, '-c', 'safe.directory=*', 'rev-parse', '--path-format=absolute', '--git-path', 'shallow']);
  if (path.exitCode !== 0) return [];
  const listed = await readFile(path.stdout.trim(), 'utf8').catch(() => '');
  const out: string[] = [];
  for (const c of [...new Set(listed.split('\n').filter((l) => /^[0-9a-f]{40,64}$/.test(l)))].sort()) {
    const r = await runGit(['-C', from, '-c', 'safe.directory=*', 'merge-base', '--is-ancestor', c, commit]);
    if (r.exitCode === 0) out.push(c);
  }
  return out;
}

/** Writes (or removes) `<gitDir>/shallow` as the source's boundary below `commit` is. */
async function markShallow(source: RepoSource, commit: string, gitDir: string): Promise<void> {
  const boundary = await shallowBoundary(source, commit);
  if (boundary.length === 0) await rm(join(gitDir, 'shallow'), { force: true });
  else await writeFile(join(gitDir, 'shallow'), `${boundary.join('\n')}\n`);
}

export async function checkoutAtCommit(opts: CheckoutOptions): Promise<void> {
  const branch = opts.branch ?? 'main';
  const from = repoSourceLocation(opts.source);
  await ensureEmptyDir(opts.target);
  const t = opts.target;
  await git(['init', '-q', '--template=', '-b', branch, t]);
  const alternates = join(t, '.git', 'objects', 'info', 'alternates');
  if (opts.sharedHistory) {
    // Objects the shared store has are not fetched: the store's refs are offered as "have"s.
    await mkdir(dirname(alternates), { recursive: true });
    await writeFile(alternates, `${opts.sharedHistory.objects}\n`);
  }
  await fetchCommit(t, from, opts.commit, branch);
  await markShallow(opts.source, opts.commit, join(t, '.git'));
  await git(['-C', t, 'reset', '-q', '--hard', branch]);
  await scrubFresh(join(t, '.git'));
  if (opts.sharedHistory?.objectsAtRuntime !== undefined) await writeFile(alternates, `${opts.sharedHistory.objectsAtRuntime}\n`);
}

/**
 * A bare repository holding the history every given commit shares: the objects reachable from
 * their merge base, which each of those commits can already reach, so sharing it reveals nothing
 * from any instance's future. Instance checkouts then borrow it (CheckoutOptions.sharedHistory)
 * and carry only their own new objects: N checkouts of a big repository store its history once.
 * Returns the merge base, or null (nothing made) when the commits share no history.
 */
export async function makeSharedHistory(source: RepoSource, commits: readonly string[], target: string): Promise<string | null> {
  const from = repoSourceLocation(source);
  if (commits.length === 0) return null;
  await ensureEmptyDir(target);
  await git(['init', '-q', '--bare', '--template=', '-b', 'history', target]);
  // Fetch every commit first (merge-base needs them locally), then keep only the merge base.
  for (const [i, c] of commits.entries()) await fetchCommit(target, from, c, `c${i}`, true);
  let base: string;
  try {
    base = (await git(['--git-dir', target, 'merge-base', '--octopus', ...commits])).trim();
  } catch (e) {
    if (e instanceof GitError) base = '';
    else throw e;
  }
  if (base === '') {
    await rm(target, { recursive: true, force: true });
    return null;
  }
  await git(['--git-dir', target, 'update-ref', 'refs/heads/history', base]);
  for (const [i] of commits.entries()) await git(['--git-dir', target, 'update-ref', '-d', `refs/heads/c${i}`]);
  await markShallow(source, base, target);
  await scrub(target);
  return base;
}

/** Every commit reachable from any ref, HEAD or the index in a repository: for audits and tests. */
export async function reachableCommits(repo: string): Promise<string[]> {
  const out = await git(['-C', repo, 'rev-list', '--all', '--reflog', 'HEAD']);
  return out.split('\n').filter((l) => l !== '');
}

/** Whether an object (commit, tree, blob) exists at all in a repository's object store. */
export async function hasObject(repo: string, oid: string): Promise<boolean> {
  try {
    await git(['-C', repo, 'cat-file', '-e', oid]);
    return true;
  } catch (e) {
    if (e instanceof GitError) return false;
    throw e;
  }
}

/**
 * A host cache of history stores, one per base commit, so that many builds of a repository's
 * history layer make the store once and copy it (which also makes every copy byte-identical).
 * Built under a temporary name and renamed into place: concurrent builders race harmlessly.
 */
async function cachedHistory(source: RepoSource, base: string, cacheDir: string): Promise<string> {
  const final = join(cacheDir, `${base}.git`);
  if (
    await readdir(final).then(
      () => true,
      () => false,
    )
  )
    return final;
  await mkdir(cacheDir, { recursive: true });
  const tmp = await mkdtemp(join(cacheDir, `.tmp-${base.slice(0, 12)}-`));
  try {
    await makeSharedHistory(source, [base], join(tmp, 'h.git'));
    await rename(join(tmp, 'h.git'), final).catch((e: unknown) => {
      // Another builder won the race: its store is the same history.
      if (!isErrno(e, 'ENOTEMPTY') && !isErrno(e, 'EEXIST')) throw e;
    });
  } finally {
    await rm(tmp, { recursive: true, force: true });
  }
  return final;
}

/**
 * The content of a history layer: into `root` (the layer's directory), the bare repository of
 * `recipe.base` and its ancestry at `recipe.path`. `historyCache`: a host directory where stores
 * are made once and copied from (recommended for dataset builds: one per env and repository).
 */
export async function makeHistoryLayer(recipe: HistoryRecipe, root: string, opts: { historyCache?: string } = {}): Promise<void> {
  const store = join(root, recipe.path);
  if (opts.historyCache === undefined) {
    await makeSharedHistory(recipe.repo, [recipe.base], store);
    return;
  }
  await mkdir(dirname(store), { recursive: true });
  await cp(await cachedHistory(recipe.repo, recipe.base, opts.historyCache), store, { recursive: true, preserveTimestamps: true });
}

type Segment = NonNullable<NonNullable<InstanceRecipe['history']>['segments']>[number];

/**
 * A pack of the objects reachable from `seg.commit` and not from any of `seg.after`, written as
 * `<dir>/pack-<hash>.{pack,idx}` by the source repository with one thread, so the same source
 * gives the same bytes (and the registry one copy). Complete, not thin: it deltas only against
 * its own objects. Returns the paths of the two files.
 */
async function makeSegmentPack(source: RepoSource, seg: Segment, dir: string): Promise<string[]> {
  if ('url' in source)
    throw new InvalidInputError(`history segments need a local repository, not ${source.url}`, 'use --repos DIR with mirrors of the repositories');
  const from = repoSourceLocation(source);
  await mkdir(dir, { recursive: true });
  const r = await runGit(['-C', from, '-c', 'pack.threads=1', '-c', 'safe.directory=*', 'pack-objects', '--revs', '-q', join(dir, 'pack')], {
    input: `${seg.commit}\n${seg.after.map((a) => `^${a}\n`).join('')}`,
  });
  const hash = r.stdout.trim();
  if (r.exitCode !== 0 || !/^[0-9a-f]{40,64}$/.test(hash)) {
    if (/bad revision|unknown revision|bad object/i.test(r.stderr))
      throw new NotFoundError(`commit ${seg.commit} (or ${seg.after.join(', ')}) in ${from}`, 'update the mirror (`git fetch`) or fix base_commit');
    throw new GitError(
      `git pack-objects failed (${r.exitCode ?? 'spawn error'}): ${r.stderr.trim() || r.message}`,
      'is the repository readable? the full git error is above',
    );
  }
  return [join(dir, `pack-${hash}.pack`), join(dir, `pack-${hash}.idx`)];
}

/** makeSegmentPack once per host: `<cacheDir>/segments/<key>/`, made under a temporary name and renamed into place. */
async function cachedSegmentPack(source: RepoSource, seg: Segment, cacheDir: string): Promise<string[]> {
  const key = createHash('sha256')
    .update(`${seg.commit}\n${[...seg.after].sort().join('\n')}`)
    .digest('hex')
    .slice(0, 32);
  const final = join(cacheDir, 'segments', key);
  const list = async (): Promise<string[] | null> => {
    const names = await readdir(final).catch(() => null);
    return names === null
      ? null
      : names
          .filter((n) => /^pack-[0-9a-f]+\.(pack|idx)$/.test(n))
          .sort()
          .map((n) => join(final, n));
  };
  const have = await list();
  if (have !== null && have.length === 2) return have;
  await mkdir(dirname(final), { recursive: true });
  const tmp = await mkdtemp(join(dirname(final), `.tmp-${key.slice(0, 12)}-`));
  try {
    await makeSegmentPack(source, seg, join(tmp, 'p'));
    await rename(join(tmp, 'p'), final).catch((e: unknown) => {
      // Another builder won the race: its pack is the same objects.
      if (!isErrno(e, 'ENOTEMPTY') && !isErrno(e, 'EEXIST')) throw e;
    });
  } finally {
    await rm(tmp, { recursive: true, force: true });
  }
  return (await list()) ?? [];
}

/** Hardlinks `files` into `dir` (a copy across file systems): the checkout's packs are never written. */
async function linkInto(files: readonly string[], dir: string): Promise<void> {
  for (const f of files) {
    const to = join(dir, basename(f));
    await link(f, to).catch(async (e: unknown) => {
      if (isErrno(e, 'EXDEV') || isErrno(e, 'EPERM')) await copyFile(f, to);
      else if (!isErrno(e, 'EEXIST')) throw e;
    });
  }
}

/**
 * A checkout whose objects are the shared history (alternates) plus one pack per segment: no
 * fetch, no negotiation, no repack; git only checks the work tree out.
 */
async function checkoutFromSegments(
  recipe: InstanceRecipe,
  segments: readonly Segment[],
  target: string,
  historyObjects: string,
  cacheDir: string | undefined,
): Promise<void> {
  await ensureEmptyDir(target);
  await git(['init', '-q', '--template=', '-b', 'main', target]);
  const objects = join(target, '.git', 'objects');
  await mkdir(join(objects, 'info'), { recursive: true });
  await writeFile(join(objects, 'info', 'alternates'), `${historyObjects}\n`);
  const packDir = join(objects, 'pack');
  await mkdir(packDir, { recursive: true });
  for (const seg of segments) {
    if (cacheDir === undefined) await makeSegmentPack(recipe.repo, seg, packDir);
    else await linkInto(await cachedSegmentPack(recipe.repo, seg, cacheDir), packDir);
  }
  await git(['-C', target, 'update-ref', 'refs/heads/main', recipe.commit]);
  await markShallow(recipe.repo, recipe.commit, join(target, '.git'));
  await git(['-C', target, 'reset', '-q', '--hard', 'main']);
  await scrubFresh(join(target, '.git'));
}

/**
 * The host-side part of building an instance layer: into `root` (the layer's upper directory),
 * the checkout at `workdir`. With a shared history (recipe.history), `historyObjects` is the
 * objects directory of that history's store as the host sees it now (the laid-out history layer
 * below); the checkout borrows from it, holds only the history after its base (as segment packs
 * when the recipe has them, else fetched), and its alternates name the path the sandbox will
 * see. `historyCache`: a host directory where segment packs are made once and linked from.
 * Post-checkout commands run afterwards, in the sandbox (instanceBuildScript).
 */
export async function checkoutInstance(recipe: InstanceRecipe, root: string, opts: { historyObjects?: string; historyCache?: string } = {}): Promise<void> {
  const target = join(root, recipe.workdir);
  if (recipe.history === undefined) {
    await checkoutAtCommit({ source: recipe.repo, commit: recipe.commit, target });
    return;
  }
  if (opts.historyObjects === undefined) {
    throw new InvalidInputError(
      `instance ${recipe.name ?? recipe.commit} has a shared history but no history store was given`,
      'build it on its history layer (plans do: planDataset)',
    );
  }
  const segments = recipe.history.segments ?? [];
  if (segments.length > 0) await checkoutFromSegments(recipe, segments, target, opts.historyObjects, opts.historyCache);
  else await checkoutAtCommit({ source: recipe.repo, commit: recipe.commit, target, sharedHistory: { objects: opts.historyObjects } });
  // A base that is not an ancestor of the commit would put another line of history (maybe this
  // instance's future) in the store: refuse it.
  const isAncestor = await git(['-C', target, 'merge-base', '--is-ancestor', recipe.history.base, 'HEAD']).then(
    () => true,
    () => false,
  );
  if (!isAncestor) {
    throw new InvalidInputError(
      `history base ${recipe.history.base} is not an ancestor of ${recipe.commit}`,
      "use the merge base of the instances' commits (computeHistoryBases)",
    );
  }
  await writeFile(join(target, '.git', 'objects', 'info', 'alternates'), `${join(recipe.history.path, 'objects')}\n`);
}
