/**
 * Building one plan node into a layer: a base from its rootfs source, an env by running its
 * commands as root in a build sandbox over its parent and capturing the sandbox's upper dir, an
 * instance by a history-free checkout (plus post-checkout commands, captured the same way).
 * A layer is published (cache ref, then tag) only after it is complete; a failure publishes nothing.
 */
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { appendFile, mkdir, readFile, rm, stat } from 'node:fs/promises';
import { availableParallelism } from 'node:os';
import { dirname, join } from 'node:path';
import { promisify } from 'node:util';
import type { Digest } from '../cas/digest.js';
import { MinisandboxError } from '../errors.js';
import type { EnvConfig, RuntimeConfig } from '../layer/env.js';
import { populateBusyboxRoot, baseRootfsCommand } from '../recipe/base-rootfs.js';
import { envBuildScript, instanceBuildScript, stagedFiles } from '../recipe/build-script.js';
import { checkoutInstance, makeHistoryLayer } from '../recipe/checkout.js';
import type { EnvRecipe, HistoryRecipe, InstanceRecipe, Recipe } from '../recipe/schema.js';
import type { NormalizedRecipe } from '../recipe/normalize.js';
import type { Registry } from '../registry/registry.js';
import { layerIdShift, layerMapping } from '../runtime/open.js';
import { idShiftOf } from '../host/subid.js';
import { type Sandbox, createSandbox, probeHost } from '../sandbox/index.js';
import { acquireLease, releaseLease } from '../store/leases.js';
import type { StorePaths } from '../store/paths.js';
import { ensureLayer, pullEnv } from '../store/pull.js';
import { type PushOptions, type PushResult, pushTree } from '../publish/push.js';
import { resolveEnv } from '../registry/resolve-env.js';
import type { CatalogCache } from './catalog-cache.js';
import type { Discarder } from './discard.js';
import { prestartHashWorkers } from '../layer/capture-hash.js';
import type { PhaseClock } from './phases.js';
import { UpperFullError, upperFull } from './upper.js';
import { HOST_CA_FILE, type HostNetworkSettings, hostNetworkEnv, stageHostCa } from './host-network.js';
import { BUILD_GIT_CONFIG, buildGitConfigEnv } from './build-git-config.js';

export class BuildCommandError extends MinisandboxError {
  constructor(
    readonly label: string,
    readonly logPath: string,
    detail: string,
    /** The log suggests a network hiccup (DNS, connection reset, 5xx): worth another try. */
    readonly transient: boolean,
  ) {
    super('BUILD_FAILED', `${label}: ${detail}`, { hint: `see the build log: ${logPath}` });
  }
}

const TRANSIENT = new RegExp(
  [
    'Temporary failure (in name )?resolving',
    'Could not resolve',
    'Connection (timed out|reset|refused)',
    'Failed to fetch .* (5\\d\\d|Hash Sum mismatch)',
    'Network is unreachable',
    'TLS handshake',
    'Read timed out',
  ].join('|'),
  'i',
);

export interface BuildEnvContext {
  registry: Registry;
  store: StorePaths;
  logPath: string;
  /** Build commands' wall-clock limit. */
  timeoutMs: number;
  signal: AbortSignal;
  /** Where each phase's wall-clock time goes. */
  clock: PhaseClock;
  /** Deletes finished build sandboxes' upper dirs in the background. */
  discard: Discarder;
  /** The registry's objects, shared by every push of the build. */
  catalog: CatalogCache;
  /** Size cap of a build sandbox's upper in RAM (see upper.ts); 0 or absent: uppers on disk. */
  ramUpperBytes?: number;
  /** The host's proxy and CA settings, which build sandboxes with network get (see host-network.ts); absent: none. */
  hostNetwork?: HostNetworkSettings;
  /** A layer's capture has read this many distinct contents and bytes so far. */
  onCaptured?: (files: number, bytes: number) => void;
}

export interface Parent {
  digest: Digest;
  config: EnvConfig;
}

async function log(path: string, text: string): Promise<void> {
  await mkdir(dirname(path), { recursive: true });
  await appendFile(path, text.endsWith('\n') ? text : `${text}\n`);
}

/** `signal`: ends the command (TERM) when the build is stopped. */
async function runLogged(argv: string[], logPath: string, label: string, signal?: AbortSignal): Promise<void> {
  await log(logPath, `$ ${argv.join(' ')}`);
  try {
    const r = await promisify(execFile)(argv[0]!, argv.slice(1), { maxBuffer: 256 << 20, ...(signal === undefined ? {} : { signal }) });
    await log(logPath, r.stdout + r.stderr);
  } catch (e) {
    const err = e as { stdout?: string; stderr?: string; code?: number; message: string };
    await log(logPath, `${err.stdout ?? ''}${err.stderr ?? ''}\nfailed: ${err.message}`);
    throw new BuildCommandError(label, logPath, `${argv[0]} failed (exit ${err.code ?? '?'})`, TRANSIENT.test(`${err.stdout ?? ''}${err.stderr ?? ''}`));
  }
}

/**
 * pushTree with its phases (catalog, capture+pack, upload) booked on the clock as `push-*`.
 * `onRead` runs once `dir` has been read for the last time (the upload starts).
 */
async function pushTimed(ctx: BuildEnvContext, dir: string, opts: PushOptions, onRead?: () => void): Promise<PushResult> {
  const phases = ctx.clock.announced('push-');
  const onProgress = (p: { phase: string; files?: number; bytes?: number }): void => {
    phases.onPhase(p);
    if (p.files !== undefined && p.bytes !== undefined) ctx.onCaptured?.(p.files, p.bytes);
    if (p.phase === 'upload') onRead?.();
  };
  try {
    return await pushTree(ctx.registry, ctx.store, dir, { ...opts, onProgress, catalog: () => ctx.catalog.refresh() });
  } finally {
    phases.end();
  }
}

/** A base layer: a root filesystem made on the host, captured and pushed without a parent. */
export async function buildBase(recipe: Extract<Recipe, { kind: 'base' }>, ctx: BuildEnvContext, tag: string, config: Partial<RuntimeConfig>): Promise<Digest> {
  const root = join(ctx.store.tmpDir, `base-${randomBytes(6).toString('hex')}`);
  await mkdir(root, { recursive: true });
  try {
    await ctx.clock.time('rootfs', async () => {
      if (recipe.from.type === 'busybox') await populateBusyboxRoot(recipe.from.path ?? '/bin/busybox', root);
      else await runLogged(baseRootfsCommand(recipe.from, root), ctx.logPath, 'base rootfs', ctx.signal);
    });
    // debootstrap leaves its apt lists and caches; they are not part of a reproducible base
    await rm(join(root, 'var/cache/apt/archives'), { recursive: true, force: true }).catch(() => undefined);
    const r = await pushTimed(ctx, root, { tag, config });
    return r.env;
  } finally {
    await rm(root, { recursive: true, force: true });
  }
}

interface SandboxBuild {
  network: boolean;
  /** With network: pass in the host's proxy variables and CA certificates (the recipe's `hostNetworkSettings`). */
  hostNetworkSettings: boolean;
  label: string;
  tag: string;
  config: Partial<RuntimeConfig>;
  stage?: (sb: Sandbox) => Promise<void>;
}

/**
 * Runs `script` as root in a build sandbox over `parent`, then captures and pushes its upper dir:
 * in RAM when ctx allows one (see upper.ts), and on disk when there is none or the build outgrew it.
 */
async function buildInSandbox(parent: Parent, script: string, ctx: BuildEnvContext, opts: SandboxBuild): Promise<Digest> {
  const ram = ctx.ramUpperBytes ?? 0;
  if (ram > 0) {
    try {
      return await buildInSandboxOn(parent, script, ctx, opts, ram);
    } catch (e) {
      if (!(e instanceof UpperFullError)) throw e;
      await log(ctx.logPath, `note: ${e.message}; building again with the upper on disk`);
    }
  }
  return buildInSandboxOn(parent, script, ctx, opts, 0);
}

/** One build attempt; `ramBytes` > 0: a tmpfs upper of that size, else a disk upper. */
async function buildInSandboxOn(parent: Parent, script: string, ctx: BuildEnvContext, opts: SandboxBuild, ramBytes: number): Promise<Digest> {
  const clock = ctx.clock;
  const host = await clock.time('host-probe', () => probeHost());
  // Builds mount the parent's real-owner lay-out idmapped where the host can (see open.ts): the
  // same trees export and task sandboxes use, so a node that builds and runs lays each out once.
  const mapping = await layerMapping(ctx.store, host, (m) => void log(ctx.logPath, `warning: ${m}`));
  const pulled = await clock.time('parent-layout', () => pullEnv(ctx.registry, ctx.store, parent.digest, { idShift: layerIdShift(mapping) }));
  const hostNet = opts.network && opts.hostNetworkSettings && ctx.hostNetwork !== undefined ? ctx.hostNetwork : undefined;
  // the host's CA bundle, as a lower layer of its own above the parent's: read, never captured
  const hostCa = hostNet === undefined ? null : await stageHostCa(hostNet, ctx.store.tmpDir, layerIdShift(mapping));
  const inRam = ramBytes > 0;
  const t0 = performance.now();
  let sb: Sandbox;
  try {
    sb = await createSandbox(
      {
        lowerDirs: hostCa === null ? pulled.layerDirs : [...pulled.layerDirs, hostCa.dir],
        stateDir: ctx.store.sandboxesDir,
        config: { ...parent.config.config, workdir: '/' },
        network: opts.network ? 'host' : 'none',
        upper: inRam ? 'tmpfs' : 'disk',
        // The upper is captured only after the commands succeeded, and thrown away otherwise: the
        // fsyncs of dpkg and friends need not reach the disk.
        volatileUpper: !inRam,
        ...(inRam ? { limits: { diskBytes: ramBytes } } : {}),
        capabilities: 'default',
        idmapLowers: mapping.kind === 'idmap',
        commandTimeoutMs: ctx.timeoutMs,
        maxOutputBytes: 64 << 20,
      },
      {
        host,
        onCreated: async (s) => void (await acquireLease(ctx.store, s.id, pulled.layerDirs)),
        onDestroyed: async (s) => releaseLease(ctx.store, s.id),
        warn: (m) => void log(ctx.logPath, `warning: ${m}`),
      },
    );
  } catch (e) {
    await hostCa?.remove();
    throw e;
  }
  clock.add('sandbox-create', performance.now() - t0);
  // what the parent's environment sets itself (an image's own SSL_CERT_FILE) stays its own
  const parentEnv = parent.config.config.env;
  const netEnv = hostNet === undefined ? undefined : Object.fromEntries(Object.entries(hostNetworkEnv(hostNet)).filter(([k]) => !Object.hasOwn(parentEnv, k)));
  // local-path clones (a submodule naming a mirror in a lower layer) copy instead of linking
  const execEnv = { ...netEnv, ...buildGitConfigEnv(parentEnv) };
  // What the commands write is owned by the sandbox's own range (its slot of root's pool over
  // idmapped layers): the capture takes that range's start off every owner.
  const shift = idShiftOf(sb.state.idMap);
  // A tmpfs upper is mounted in the holder's mount namespace only: reached through its root link.
  const ramUpper = `/proc/${sb.state.holderPid}/root${sb.state.upperDir}`;
  const onAbort = (): void => void sb.destroy();
  ctx.signal.addEventListener('abort', onAbort);
  let trash: string | null | undefined; // undefined: not moved aside yet; null: could not be
  let destroying: Promise<void> | null = null;
  try {
    if (opts.stage !== undefined) await clock.time('stage', () => opts.stage!(sb));
    await log(
      ctx.logPath,
      `--- ${opts.label}: build script${inRam ? ` (upper in RAM, up to ${Math.round(ramBytes / (1 << 20))} MiB)` : ''} ---\n${script}--- output ---`,
    );
    // parse the registry's pack indexes while the commands run; the push then reads only newer ones
    ctx.catalog.warm();
    // and start the capture's hashing threads, so it hashes off the main thread from its first file
    prestartHashWorkers(Math.min(4, availableParallelism()));
    if (netEnv !== undefined) {
      // names only: a proxy URL may hold a password
      const names = Object.keys(netEnv).filter((k) => k === k.toUpperCase());
      await log(
        ctx.logPath,
        `host network settings: ${names.length > 0 ? names.join(', ') : 'none'}${hostCa === null ? '' : ` (the host's CA bundle at ${HOST_CA_FILE})`}`,
      );
    }
    await log(ctx.logPath, `git settings: ${BUILD_GIT_CONFIG.map(([k, v]) => `${k}=${v}`).join(', ')} (local clones copy: see build-git-config.ts)`);
    const o = await clock.time('commands', () => sb.exec(['/bin/sh', '-c', script], { env: execEnv }));
    await log(
      ctx.logPath,
      `${o.stdout}${o.stderr}${o.stdoutTruncated || o.stderrTruncated ? '\n[output truncated]' : ''}\n--- ` +
        `${o.status}, exit ${o.exitCode ?? o.signal}, ${(o.durationMs / 1000).toFixed(1)} s ---`,
    );
    if (ctx.signal.aborted) throw new MinisandboxError('BUILD_CANCELLED', `${opts.label}: cancelled`);
    if (o.status !== 'ok' || o.exitCode !== 0) {
      if (inRam && o.status === 'ok' && (await upperFull(ramUpper, o.stdout + o.stderr))) throw new UpperFullError(ramBytes);
      const what = o.status === 'ok' ? `build commands failed with exit status ${o.exitCode}` : `build commands ended: ${o.status}`;
      throw new BuildCommandError(opts.label, ctx.logPath, what, TRANSIENT.test(o.stdout + o.stderr));
    }
    if (inRam) {
      // Nothing the commands started is left running (each command's pid namespace ends with it),
      // so the upper is still while it is captured; the sandbox ends while the layer uploads.
      const r = await pushTimed(
        ctx,
        `${ramUpper}/u`,
        { parent, overlayUpper: true, idShift: shift, keepRootPath: true, tag: opts.tag, config: opts.config },
        () => {
          destroying = sb.destroy();
          destroying.catch(() => undefined); // awaited below
        },
      );
      return r.env;
    }
    // The upper dir on disk holds exactly what the commands wrote (with overlayfs whiteouts),
    // owned by host ids shifted into the sandbox's range. Moved out of the sandbox, it outlives
    // the sandbox's teardown: the sandbox ends while the upper is captured, which also stops
    // anything the commands left running from writing into the tree being read.
    trash = await clock.time('upper-aside', () => ctx.discard.moveAside(sb.state.upperDir));
    if (trash !== null) {
      destroying = sb.destroy();
      destroying.catch(() => undefined); // awaited below; no unhandled rejection meanwhile
    }
    const upper = trash === null ? join(sb.state.upperDir, 'u') : join(trash, 'upper', 'u');
    const r = await pushTimed(ctx, upper, { parent, overlayUpper: true, idShift: shift, tag: opts.tag, config: opts.config });
    return r.env;
  } finally {
    ctx.signal.removeEventListener('abort', onAbort);
    if (!inRam && trash === undefined) trash = await clock.time('upper-aside', () => ctx.discard.moveAside(sb.state.upperDir));
    // booked: only what the push did not already cover
    await clock.time('sandbox-destroy', () => destroying ?? sb.destroy());
    if (trash !== null && trash !== undefined) ctx.discard.remove(trash, sb.state.idMap);
    await hostCa?.remove();
  }
}

export async function buildEnv(recipe: EnvRecipe, normalized: NormalizedRecipe, parent: Parent, ctx: BuildEnvContext, tag: string): Promise<Digest> {
  if (normalized.kind !== 'env') throw new Error('buildEnv needs an env recipe');
  const staging = '/.minisandbox-staging';
  const script = `${envBuildScript(recipe, normalized, staging)}\n`;
  const cleanup = `\nrm -rf ${staging}\n`;
  return buildInSandbox(parent, script.replace(/exit 0\n*$/, `${cleanup}exit 0\n`), ctx, {
    network: recipe.network,
    hostNetworkSettings: recipe.hostNetworkSettings !== false,
    label: recipe.name ?? 'env',
    tag,
    config: { env: { ...parent.config.config.env, ...recipe.env }, workdir: recipe.workdir },
    stage: async (sb) => {
      for (const f of stagedFiles(recipe)) {
        const st = await stat(f.src);
        const dest = `${staging}/${f.name}`;
        if (st.isDirectory()) {
          const tar = await promisify(execFile)('tar', ['-C', f.src, '-cf', '-', '.'], { encoding: 'buffer', maxBuffer: 1 << 30 });
          const o = await sb.exec(['/bin/sh', '-c', 'mkdir -p "$1" && tar -xf - -C "$1"', 'stage', dest], { stdin: tar.stdout });
          if (o.status !== 'ok' || o.exitCode !== 0)
            throw new BuildCommandError(recipe.name ?? 'env', ctx.logPath, `cannot stage ${f.src}: ${o.stderr.trim()}`, false);
        } else {
          await sb.writeFile(dest, await readFile(f.src), { mode: st.mode & 0o7777 });
        }
      }
    },
  });
}

/**
 * A history layer: the bare repository of a commit and its ancestry, which the instance layers of
 * one repository stack on and borrow objects from (see checkout.ts). Made once per host in
 * `<store>/history-cache/` and copied, so the layers built on several envs are the same bytes.
 */
export async function buildHistory(recipe: HistoryRecipe, parent: Parent, ctx: BuildEnvContext, tag: string): Promise<Digest> {
  const root = join(ctx.store.tmpDir, `history-${randomBytes(6).toString('hex')}`);
  try {
    await mkdir(root, { recursive: true });
    await log(ctx.logPath, `history of ${JSON.stringify(recipe.repo)} up to ${recipe.base} into ${recipe.path}`);
    await ctx.clock.time('history', () => makeHistoryLayer(recipe, root, { historyCache: join(ctx.store.root, 'history-cache') }));
    return (await pushTimed(ctx, root, { parent, tag })).env;
  } finally {
    await rm(root, { recursive: true, force: true });
  }
}

/**
 * The objects directory of the history store an instance borrows from, as the host sees it: in
 * the history layer its parent's stack ends with, laid out in the store (once per host; the
 * instance's build sandbox lays out the same layer anyway).
 */
async function historyObjectsOf(recipe: InstanceRecipe, parent: Parent, ctx: BuildEnvContext): Promise<string | undefined> {
  if (recipe.history === undefined) return undefined;
  const top = parent.config.layers.at(-1);
  if (top === undefined)
    throw new MinisandboxError('BUILD_FAILED', `instance ${recipe.name ?? recipe.commit}: no history layer below it`, {
      hint: 'plan the dataset with planDataset, which puts a history node under its instances',
    });
  const { dir } = await ensureLayer(ctx.registry, ctx.store, top, 0);
  const objects = join(dir, recipe.history.path, 'objects');
  if (
    !(await stat(objects).then(
      (s) => s.isDirectory(),
      () => false,
    ))
  ) {
    throw new MinisandboxError('BUILD_FAILED', `instance ${recipe.name ?? recipe.commit}: the layer below it has no history store at ${recipe.history.path}`, {
      hint: 'rebuild with --force; the history layer and the instance recipe disagree',
    });
  }
  return objects;
}

/**
 * An instance: the repository at its commit, without later history, as a layer of its own; then,
 * if the recipe has post-checkout commands, their writes as one more layer. With a shared history
 * the checkout holds only the objects after the history's base.
 */
export async function buildInstance(
  recipe: InstanceRecipe,
  parent: Parent,
  ctx: BuildEnvContext,
  tag: string,
  config: Partial<RuntimeConfig>,
): Promise<Digest> {
  const root = join(ctx.store.tmpDir, `checkout-${randomBytes(6).toString('hex')}`);
  try {
    const target = join(root, recipe.workdir);
    await mkdir(dirname(target), { recursive: true });
    const historyObjects = await ctx.clock.time('history-layout', () => historyObjectsOf(recipe, parent, ctx));
    await log(
      ctx.logPath,
      `checkout ${JSON.stringify(recipe.repo)} at ${recipe.commit} into ` +
        `${recipe.workdir}${recipe.history ? ` borrowing history up to ${recipe.history.base} from ${recipe.history.path}` : ''}`,
    );
    await ctx.clock.time('checkout', () =>
      checkoutInstance(recipe, root, historyObjects === undefined ? {} : { historyObjects, historyCache: join(ctx.store.root, 'history-cache') }),
    );
    const hasCommands = recipe.commands.length > 0;
    const checkout = await pushTimed(ctx, root, { parent, config, ...(hasCommands ? {} : { tag }) });
    if (!hasCommands) return checkout.env;
    const withCheckout = await resolveEnv(ctx.registry, checkout.env);
    return await buildInSandbox(withCheckout, instanceBuildScript(recipe), ctx, {
      network: true,
      hostNetworkSettings: recipe.hostNetworkSettings !== false,
      label: recipe.name ?? 'instance',
      tag,
      config,
    });
  } finally {
    await rm(root, { recursive: true, force: true });
  }
}
