/**
 * The sandbox: create (holder with namespaces and overlay root), exec, sessions, files, diff, fork,
 * destroy. See commands.ts for the process chain and ARCHITECTURE.md for the measured facts behind it.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { renameSync } from 'node:fs';
import { join } from 'node:path';
import { z } from 'zod';
import { InvalidInputError, MinisandboxError } from '../errors.js';
import { RuntimeConfigSchema, type RuntimeConfig } from '../layer/env.js';
import { BindMountSchema } from './bind-mounts.js';
import { killAndThaw, removeCgroup, unthrottle, type SandboxCgroup } from './cgroup.js';
import { ARGV_FIELDS, checkEnvLeavesRoom, checkExecFits, COMMAND_FIELDS } from './arg-max.js';
import {
  commandEnv,
  DEFAULT_CAPS,
  forkSourceTarCommand,
  holderArgs,
  holderCommand,
  HOST_PATH,
  type EnterSpec,
  type HolderSpec,
  type Rlimits,
} from './commands.js';
import { launcherServer, spawnedHolder, type HolderHandle } from './launcher-server.js';
import { probeHost, type HostInfo } from './host.js';
import { DEFAULT_MAX_OUTPUT_BYTES, type CommandOutcome } from './outcome.js';
import { recordIdRangeHolder } from './idpool.js';
import { endSandbox, makeUpperDir, prepareSandbox } from './prepare.js';
import { processStartTime, sameProcessAlive } from './proc.js';
import { runInSandbox, type RawOutcome } from './runner.js';
import { TerminalSession, type TerminalSessionOptions } from './terminal-session.js';
import { Session, type SessionOptions, type SessionRunOptions } from './session.js';
import { removeTree, sandboxDir, teardown, writeState, type SandboxState } from './state.js';
import { NODE_LABEL_RE, SANDBOX_ID_RE } from './sandbox-id.js';
import { freezeUpper, releaseFrozenLowers, retainFrozenLowers } from './frozen.js';
import type { Digest } from '../cas/digest.js';
import type { EnvConfig } from '../layer/env.js';
import { mark } from '../util/timing.js';
import { randomHex } from '../util/lazy-crypto.js';
import type { ByteGrant } from '../util/byte-budget.js';

export const SandboxLimitsSchema = z.strictObject({
  memoryBytes: z.number().int().positive().optional(),
  pids: z.number().int().positive().optional(),
  cpus: z.number().positive().optional(),
  nofile: z.number().int().positive().default(4096),
  /**
   * Scheduling niceness of every process of the sandbox, 0 (the host's default) to 19; nothing in
   * the sandbox can lower it. Under contention a runtime serving many sandboxes keeps its share:
   * `serve` gives 10 (ARCHITECTURE.md: CPU share). Where the kernel groups processes by session
   * (autogroup), it orders a sandbox's processes among themselves only.
   */
  nice: z.number().int().min(0).max(19).default(0),
  /** Size cap of the writable upper dir (the tmpfs size); ignored for a disk upper. */
  diskBytes: z
    .number()
    .int()
    .positive()
    .default(1 << 30),
});
export type SandboxLimits = z.input<typeof SandboxLimitsSchema>;

export const SandboxOptionsSchema = z.strictObject({
  /**
   * Laid-out read-only layer trees, lowest first: owned by host ids idMap.start + in-sandbox id,
   * or, with idmapLowers, by their real owners.
   */
  lowerDirs: z
    .array(
      z
        .string()
        .startsWith('/')
        .regex(/^[^:,\n]+$/, 'layer paths may not contain ":" "," or newlines (overlayfs option syntax)'),
    )
    .min(1),
  config: RuntimeConfigSchema.prefault({}),
  stateDir: z.string().startsWith('/'),
  network: z.enum(['none', 'host']).default('none'),
  upper: z.enum(['tmpfs', 'disk']).default('tmpfs'),
  /**
   * Skip every sync to the upper dir (overlayfs `volatile`): for scratch sandboxes whose upper is
   * thrown away, or captured only after the commands ended cleanly, like builds. After a host
   * crash such an upper must be discarded; fsync inside the sandbox then costs nothing.
   */
  volatileUpper: z.boolean().default(false),
  limits: SandboxLimitsSchema.prefault({}),
  /**
   * Start the holder the first reset() swaps in (see Sandbox.standby) right after create, instead
   * of after the first reset: the first reset then costs what later ones do, for two more
   * processes (a holder and its init) held while the sandbox lives. For sandboxes that will be
   * reset (one per episode); tmpfs uppers only.
   */
  prewarmReset: z.boolean().default(false),
  /** Wall-clock lifetime of the whole sandbox; destroyed when it passes. */
  timeoutMs: z.number().int().positive().optional(),
  /** Default per-command timeout. */
  commandTimeoutMs: z.number().int().positive().default(600_000),
  maxOutputBytes: z.number().int().positive().default(DEFAULT_MAX_OUTPUT_BYTES),
  id: z.string().regex(SANDBOX_ID_RE).optional(),
  /**
   * The node's name (a server of a cluster): new ids, a fork's children's included, end in
   * `.<node>` (see sandbox-id.ts). Ignored where `id` is given.
   */
  idNode: z.string().regex(NODE_LABEL_RE).optional(),
  /**
   * `none`: every capability dropped (the default for tasks). `default`: the namespaced set root
   * needs to install packages (see DEFAULT_CAPS), as builds do.
   */
  capabilities: z.enum(['none', 'default']).default('none'),
  /**
   * The lower dirs hold their real owners (one lay-out for builds, export and every sandbox), and
   * are mounted idmapped through the sandbox's own user namespace; the sandbox then gets an id
   * range of its own from root's pool (idpool.ts). Root only; see idmap.ts for when a host can.
   */
  idmapLowers: z.boolean().default(false),
  /**
   * Host paths bind-mounted into the sandbox, read-only unless the caller owns the source or
   * `readonly: false` says so; never part of its writes (diff, snapshot, fork), gone with it.
   */
  mounts: z.array(BindMountSchema).max(64).default([]),
});
export type SandboxOptions = z.input<typeof SandboxOptionsSchema>;
type ParsedOptions = z.output<typeof SandboxOptionsSchema>;

export interface CreateHooks {
  host?: HostInfo;
  /** Called with the state once the sandbox is running (e.g. to take a store lease on lowerDirs). */
  onCreated?: (state: SandboxState) => void | Promise<void>;
  onDestroyed?: (state: SandboxState) => void | Promise<void>;
  /** Warnings (limits that fell back to rlimits); default: process.emitWarning. */
  warn?: (message: string) => void;
}

export interface ExecOptions {
  timeoutMs?: number;
  maxOutputBytes?: number;
  stdin?: string | Buffer;
  env?: Record<string, string>;
  /** The command's environment is `env` alone: not the environment's own, no default PATH or HOME. */
  exactEnv?: boolean;
  workdir?: string;
  /** Run as this in-sandbox user instead of config.user (e.g. root for setup steps). */
  user?: { uid: number; gid: number };
  /** Kills the command (and everything it started); the outcome is then `killed`. */
  signal?: AbortSignal;
  /**
   * Where output past each stream's first CAPTURE_FLOOR_BYTES is granted from (a server's memory
   * budget): once it refuses, the rest is dropped and the outcome says `budgetCut`.
   */
  outputBudget?: ByteGrant;
}

/** The largest patch diff() returns. */
export const DIFF_MAX_BYTES = 512 << 20;

/** A patch larger than DIFF_MAX_BYTES, or than the memory budget it was read within granted (`budgetCut`). */
export class DiffTooLargeError extends MinisandboxError {
  constructor(readonly budgetCut: boolean) {
    super('DIFF_FAILED', budgetCut ? 'the patch is larger than the memory budget could hold now' : `the patch is larger than ${DIFF_MAX_BYTES} bytes`, {
      hint: budgetCut ? 'retry when fewer requests hold memory' : 'the workdir holds files too large for a patch: remove or ignore them (.gitignore)',
    });
  }
}

export class SandboxStartError extends MinisandboxError {
  constructor(message: string, hint: string) {
    super('SANDBOX_START', message, { hint });
  }
}

// `await using` looks the method up by Symbol.asyncDispose, which Node has from 20.4 on; on older
// 20.x it is the symbol TypeScript's and esbuild's lowered `await using` fall back to.
(Symbol as { asyncDispose?: symbol }).asyncDispose ??= Symbol.for('Symbol.asyncDispose');

export class Sandbox {
  private destroyed = false;
  private lost: string | undefined;
  private destroying: Promise<void> | undefined;
  private abort = new AbortController();
  private defaultSession: Session | undefined;
  private readonly sessions = new Set<Session>();
  /** Terminal sessions and other per-sandbox processes a destroy or reset closes with the sessions. */
  private readonly closables = new Set<{ close(): void }>();
  private lifetimeTimer: NodeJS.Timeout | undefined;
  private resetting: Promise<void> = Promise.resolve();
  /** Holders a reset replaced: their exit is expected. */
  private readonly retired = new WeakSet<HolderHandle>();
  /**
   * A holder started ahead over the creation layers with an empty tmpfs upper (its own, in its
   * own mount namespace), which the next reset() to the creation state swaps in: a sandbox that
   * was reset once is likely reset again (one per episode), and swapping costs no holder start.
   */
  private standby: Promise<HolderHandle> | undefined;
  /** The lower dirs it was created over: what reset() goes back to. */
  readonly creationLowerDirs: string[];
  /**
   * Where it came from, for a snapshot of it: the environment its layers (the first
   * `origin.config.layers.length` lower dirs) belong to. Set by the runtime (runtime/open.ts).
   */
  origin: SandboxOrigin | undefined;
  /** The origin it was created with: where reset() without a snapshot goes back to. */
  creationOrigin: SandboxOrigin | undefined;

  /** @internal use createSandbox */
  constructor(
    readonly state: SandboxState,
    readonly options: ParsedOptions,
    readonly host: HostInfo,
    private holder: HolderHandle,
    private readonly cgroup: SandboxCgroup | undefined,
    readonly rlimits: Rlimits,
    private readonly hooks: CreateHooks,
    /** Limits the host could not enforce through cgroups. */
    readonly unenforced: string[],
    /** How its holder was started: a reset starts another one the same way. */
    private readonly holderSpec: HolderSpec,
  ) {
    this.creationLowerDirs = [...state.lowerDirs];
    this.watchHolder(holder);
    if (options.timeoutMs !== undefined) {
      this.lifetimeTimer = setTimeout(() => void this.destroy(), options.timeoutMs);
      this.lifetimeTimer.unref();
    }
  }

  get id(): string {
    return this.state.id;
  }

  get config(): RuntimeConfig {
    return this.options.config;
  }

  get alive(): boolean {
    return !this.destroyed;
  }

  /** Why it ended without a destroy() (its holder was killed, its launcher server died); else undefined. */
  get lostBecause(): string | undefined {
    return this.lost;
  }

  enterSpec(
    argv: string[],
    opts: {
      env?: Record<string, string> | undefined;
      exactEnv?: boolean | undefined;
      workdir?: string | undefined;
      user?: { uid: number; gid: number } | undefined;
    } = {},
  ): EnterSpec {
    return {
      launcher: this.host.tools.launcher,
      holderPid: this.state.holderPid,
      initPid: this.state.initPid,
      network: this.state.network,
      env: opts.exactEnv === true ? { ...(opts.env ?? {}) } : { ...this.config.env, ...(opts.env ?? {}) },
      ...(opts.exactEnv === true ? { exactEnv: true } : {}),
      workdir: opts.workdir ?? this.config.workdir,
      argv,
      rlimits: this.rlimits,
      cgroupProcs: this.cgroup?.procsFiles ?? [],
      caps: this.options.capabilities === 'default' ? DEFAULT_CAPS : [],
      user: opts.user ?? this.config.user,
    };
  }

  private assertAlive(): void {
    if (this.destroyed)
      throw new MinisandboxError('SANDBOX_DESTROYED', `sandbox ${this.id} was destroyed`, { hint: 'create a new sandbox (or fork one before destroying it)' });
  }

  /** Stateless command: argv as given, or a shell string run with /bin/sh -c. */
  async exec(cmd: string[] | string, opts: ExecOptions = {}): Promise<CommandOutcome> {
    return (await this.execBytes(cmd, opts)).outcome;
  }

  /**
   * Throws what exec would throw before running anything: no command, or one the kernel could not
   * exec with this sandbox's environment and `opts.env` (ExecTooLargeError, naming `argv.N`,
   * `command`, `env.NAME` or the whole). For callers that start a command later (a job). Returns
   * the command's enter spec.
   */
  checkExec(cmd: string[] | string, opts: Pick<ExecOptions, 'env' | 'exactEnv' | 'workdir' | 'user'> = {}): EnterSpec {
    this.assertAlive();
    const argv = typeof cmd === 'string' ? ['/bin/sh', '-c', cmd] : cmd;
    if (argv.length === 0) throw new InvalidInputError('exec needs a command', 'pass an argv array with at least the program, or a shell string');
    const spec = this.enterSpec(argv, opts);
    checkExecFits(argv, commandEnv(spec.env, spec.exactEnv), typeof cmd === 'string' ? COMMAND_FIELDS : ARGV_FIELDS);
    return spec;
  }

  /**
   * As exec, with the kept stdout and stderr as bytes too (for callers that decode them their own
   * way); with `rawStdout` the outcome's stdout text stays empty (one copy less).
   */
  async execBytes(cmd: string[] | string, opts: ExecOptions & { rawStdout?: boolean } = {}): Promise<RawOutcome> {
    const spec = this.checkExec(cmd, opts);
    return runInSandbox(spec, {
      timeoutMs: opts.timeoutMs ?? this.options.commandTimeoutMs,
      maxOutputBytes: opts.maxOutputBytes ?? this.options.maxOutputBytes,
      stdin: opts.stdin,
      oomFile: this.cgroup?.oomFile,
      // the caller's signal, or this sandbox's end, kills the command
      signal: opts.signal === undefined ? this.abort.signal : AbortSignal.any([this.abort.signal, opts.signal]),
      outputBudget: opts.outputBudget,
      rawStdout: opts.rawStdout,
    });
  }

  /** The sandbox's default persistent shell (created on first use). */
  session(): Session {
    this.assertAlive();
    this.defaultSession ??= this.newSession();
    return this.defaultSession;
  }

  newSession(opts: SessionOptions = {}): Session {
    this.assertAlive();
    const s = new Session(() => this.enterSpec([]), {
      defaultTimeoutMs: this.options.commandTimeoutMs,
      maxOutputBytes: this.options.maxOutputBytes,
      oomFile: this.cgroup?.oomFile,
      ...opts,
    });
    this.sessions.add(s);
    return s;
  }

  /** A persistent interactive bash on a terminal (see terminal-session.ts); closed with the sandbox. */
  newTerminalSession(opts: TerminalSessionOptions = {}): TerminalSession {
    this.assertAlive();
    const t: TerminalSession = new TerminalSession(() => this.enterSpec([]), {
      ...opts,
      onClose: () => {
        this.closables.delete(t);
        opts.onClose?.();
      },
    });
    this.closables.add(t);
    return t;
  }

  /** Closes `c` when the sandbox is destroyed or reset; the returned function lets go of it. */
  own(c: { close(): void }): () => void {
    this.closables.add(c);
    return () => this.closables.delete(c);
  }

  /** Runs a command in the default session. */
  run(cmd: string, opts: SessionRunOptions = {}): Promise<CommandOutcome> {
    return this.session().run(cmd, opts);
  }

  /**
   * Reads a file as the sandbox sees it. Done from inside the sandbox's namespaces, so a symlink
   * planted by the sandbox resolves within its own root and never reaches a host file.
   */
  async readFile(path: string, opts: { maxBytes?: number } = {}): Promise<Buffer> {
    const maxBytes = opts.maxBytes ?? 256 << 20;
    const r = await this.execBytes(['/bin/sh', '-c', 'exec cat -- "$1"', 'msb-read', path], { maxOutputBytes: maxBytes, timeoutMs: 120_000, rawStdout: true });
    if (r.outcome.status !== 'ok' || r.outcome.exitCode !== 0) throw fileError('read', path, r.outcome);
    if (r.outcome.stdoutTruncated)
      throw new InvalidInputError(`${path} is larger than ${maxBytes} bytes`, 'pass a larger maxBytes, or read it in parts with exec');
    return r.stdout();
  }

  /** Writes a file (creating parent dirs) as the sandbox sees it, from inside its namespaces. */
  async writeFile(path: string, data: string | Buffer, opts: { mode?: number } = {}): Promise<void> {
    const mode = opts.mode === undefined ? '' : opts.mode.toString(8);
    const script = 'd=$(dirname -- "$1") && mkdir -p -- "$d" && cat > "$1" && if [ -n "$2" ]; then chmod "$2" -- "$1"; fi';
    const r = await this.execBytes(['/bin/sh', '-c', script, 'msb-write', path, mode], { stdin: data, timeoutMs: 120_000 });
    if (r.outcome.status !== 'ok' || r.outcome.exitCode !== 0) throw fileError('write', path, r.outcome);
  }

  /**
   * The repository's changes as a binary-safe unified git patch against `base` (default HEAD),
   * untracked files included (through a throwaway index): exactly the agent's submission.
   */
  async diff(opts: { workdir?: string; base?: string; timeoutMs?: number; outputBudget?: ByteGrant } = {}): Promise<string> {
    const script = [
      'set -e',
      'cd "$1"',
      'gitdir=$(git rev-parse --absolute-git-dir)',
      'export GIT_INDEX_FILE="$(mktemp)"',
      'trap \'rm -f "$GIT_INDEX_FILE"\' EXIT',
      // Starting from the real index keeps git's stat cache: add -A only rehashes what changed.
      'if [ -f "$gitdir/index" ]; then cp "$gitdir/index" "$GIT_INDEX_FILE"; else rm -f "$GIT_INDEX_FILE"; fi',
      'git -c safe.directory="*" -c core.fileMode=false -c core.autocrlf=false add -A',
      'git -c safe.directory="*" -c core.fileMode=false -c core.autocrlf=false -c diff.noprefix=false diff --cached --binary --no-color --no-ext-diff "$2" --',
    ].join('\n');
    const r = await this.execBytes(['/bin/sh', '-c', script, 'msb-diff', opts.workdir ?? this.config.workdir, opts.base ?? 'HEAD'], {
      timeoutMs: opts.timeoutMs ?? 300_000,
      maxOutputBytes: DIFF_MAX_BYTES,
      rawStdout: true,
      ...(opts.outputBudget === undefined ? {} : { outputBudget: opts.outputBudget }),
    });
    if (r.outcome.status !== 'ok' || r.outcome.exitCode !== 0) {
      throw new MinisandboxError(
        'DIFF_FAILED',
        `git diff in ${opts.workdir ?? this.config.workdir} failed (${r.outcome.status}, exit ${r.outcome.exitCode}): ${r.outcome.stderr.trim().slice(-400)}`,
        {
          hint: 'the workdir must be a git repository with a base commit, and git must be installed in the environment',
        },
      );
    }
    // a cut patch must not pass for the whole submission
    if (r.outcome.stdoutTruncated) throw new DiffTooLargeError(r.outcome.budgetCut === true);
    return r.stdout().toString('utf8');
  }

  /** Kills everything, unmounts, removes the sandbox's directory and cgroups. Idempotent. */
  destroy(): Promise<void> {
    this.destroying ??= this.doDestroy();
    return this.destroying;
  }

  /** `await using sb = await openSandbox(...)`: destroyed when the block is left, however it is left. */
  [Symbol.asyncDispose](): Promise<void> {
    return this.destroy();
  }

  private async doDestroy(): Promise<void> {
    this.destroyed = true;
    if (this.lifetimeTimer !== undefined) clearTimeout(this.lifetimeTimer);
    this.abort.abort();
    for (const s of this.sessions) s.close();
    for (const c of this.closables) c.close();
    // a reset in progress finishes first: its new holder is then the one to end
    await this.resetting.catch(() => undefined);
    const standby = await this.standby?.catch(() => undefined);
    this.standby = undefined;
    if (standby !== undefined) {
      this.retired.add(standby);
      standby.kill();
    }
    await unthrottle(this.state.cgroupDirs);
    // pid 1 first, so the kernel ends every process of the sandbox's pid namespace at once.
    this.holder.kill();
    // frozen (a snapshot or fork holding it), it dies only once thawed
    await killAndThaw(this.state.cgroupDirs);
    await holderGone(this.holder, this.state.holderStartTime, 2000);
    await teardown(this.options.stateDir, this.id, this.state);
    if (this.cgroup !== undefined) await removeCgroup(this.cgroup.dirs);
    // the current lower dirs, and the creation ones, held for reset() as long as the sandbox lives
    await releaseFrozenLowers([...this.state.lowerDirs, ...this.creationLowerDirs], this.state.idMap);
    await this.hooks.onDestroyed?.(this.state);
  }

  private watchHolder(h: HolderHandle): void {
    h.onExit(() => {
      // The holder never exits on its own while we live: something killed the sandbox. A holder
      // replaced by reset() is killed on purpose.
      if (this.retired.has(h)) return;
      if (!this.destroyed) this.lost = h.lostBecause ?? "its holder exited: the sandbox's holder or init was killed";
      void this.destroy();
    });
  }

  /** The standby holder, if there is a live one for these lower dirs (and the upper is tmpfs). */
  private async takeStandby(lowerDirs: string[]): Promise<HolderHandle | undefined> {
    const p = this.standby;
    this.standby = undefined;
    if (p === undefined) return undefined;
    const h = await p.catch(() => undefined);
    if (h === undefined) return undefined;
    if (h.hasExited || lowerDirs.length !== this.creationLowerDirs.length || lowerDirs.some((d, i) => d !== this.creationLowerDirs[i])) {
      this.retired.add(h);
      h.kill();
      return undefined;
    }
    return h;
  }

  /** Starts the holder the next reset() swaps in, now (in the background), if there is none yet. */
  prewarmReset(): void {
    this.prepareStandby();
  }

  /** Starts the next standby holder in the background (tmpfs uppers only: a disk upper is one dir). */
  private prepareStandby(): void {
    if (this.state.upperKind !== 'tmpfs' || this.destroyed || this.standby !== undefined) return;
    const p = startHolder({ ...this.holderSpec, lowerDirs: this.creationLowerDirs, fromTar: false }, undefined);
    this.standby = p;
    p.then(
      (h) => {
        if (this.destroyed || this.standby !== p) {
          // destroyed meanwhile (doDestroy kills what it finds in this.standby; this one it may have missed)
          this.retired.add(h);
          if (this.standby !== p) h.kill();
          return;
        }
        this.state.standby = recordedChain(h);
        writeState(this.options.stateDir, this.state);
      },
      () => {
        if (this.standby === p) this.standby = undefined;
      },
    );
  }

  /** Every session this sandbox has open. */
  get openSessions(): Session[] {
    return [...this.sessions];
  }

  /**
   * Back to the creation state (or over other lower dirs: a snapshot's), same id: every process
   * ends, every session is closed, the writable layer is thrown away. Its cost does not grow with
   * what was written: a new holder starts with a fresh upper (a new tmpfs in its own mount
   * namespace, or a new dir), and the old holder, its namespaces and its upper go in the background.
   */
  reset(opts: { lowerDirs?: string[] } = {}): Promise<void> {
    this.assertAlive();
    const run = this.resetting.catch(() => undefined).then(() => this.doReset(opts.lowerDirs ?? this.creationLowerDirs));
    this.resetting = run;
    return run;
  }

  private async doReset(lowerDirs: string[]): Promise<void> {
    this.assertAlive();
    const old = this.holder;
    const oldState = { ...this.state };
    this.abort.abort();
    this.abort = new AbortController();
    for (const s of this.sessions) s.close();
    this.sessions.clear();
    for (const c of this.closables) c.close();
    this.closables.clear();
    this.defaultSession = undefined;
    // pid 1 of the old namespaces: the kernel ends every process in them, in its own time
    this.retired.add(old);
    old.kill();
    let trash: string | undefined;
    if (this.state.upperKind === 'disk') {
      // the old upper keeps serving the dying overlay under its new name; removed once that is gone
      trash = join(sandboxDir(this.options.stateDir, this.id), `trash-${randomHex(6)}`);
      renameSync(this.state.upperDir, trash);
      makeUpperDir(this.state.upperDir, 'disk', this.host.isRoot, this.state.idMap);
    }
    retainFrozenLowers(lowerDirs);
    let holder: HolderHandle;
    try {
      holder = (await this.takeStandby(lowerDirs)) ?? (await startHolder({ ...this.holderSpec, lowerDirs, fromTar: false }, undefined));
    } catch (e) {
      void releaseFrozenLowers(lowerDirs, this.state.idMap);
      // the old holder is dead: without a new one the sandbox is gone
      void this.destroy();
      throw e;
    }
    this.holder = holder;
    this.watchHolder(holder);
    Object.assign(this.state, recordedChain(holder));
    this.state.lowerDirs = [...lowerDirs];
    delete this.state.standby;
    writeState(this.options.stateDir, this.state);
    this.prepareStandby();
    if (this.state.idSlot !== undefined) recordIdRangeHolder({ path: this.state.idSlot }, this.id, holder.pid, this.state.holderStartTime);
    // the old holder may still have them mounted: removed once it is gone
    void holderGone(old, oldState.holderStartTime, 10_000).then(async () => {
      await releaseFrozenLowers(oldState.lowerDirs, this.state.idMap);
      if (trash !== undefined) await removeTree(trash, this.state.idMap).catch(() => undefined);
    });
  }
}

/** Where a sandbox's layers came from (see Sandbox.origin). */
export interface SandboxOrigin {
  /** The environment's digest and config (its layers are the sandbox's lowest lower dirs). */
  env: { digest: Digest; config: EnvConfig };
  /** The ref it was opened from, if any. */
  ref?: string;
}

/** Starts a holder through the launcher server (or, for a streamed fork, spawned with the tar on fd 4). */
async function startHolder(spec: HolderSpec, forkFrom: Sandbox | undefined, onSpawn?: (c: ChildProcess) => void): Promise<HolderHandle> {
  if (forkFrom === undefined) {
    const r = await launcherServer(spec.launcher).start(holderArgs(spec), 30_000);
    if (!r.ok)
      throw new SandboxStartError(
        `sandbox holder exited (status ${r.status ?? 'none'}) before the sandbox was ready: ${r.stderr.trim().slice(-800) || 'no error output'}`,
        startHint(r.stderr),
      );
    return r.holder;
  }
  const argv = holderCommand(spec);
  const spawned = spawn(argv[0]!, argv.slice(1), { stdio: ['pipe', 'pipe', 'pipe', 'pipe', 'pipe'], env: { PATH: HOST_PATH } });
  onSpawn?.(spawned);
  spawned.stdin!.on('error', () => undefined);
  await streamUpper(forkFrom, spawned);
  const { initPid } = await readHolderInfo(spawned, 30_000);
  return spawnedHolder(spawned, initPid);
}

/**
 * Waits until the holder has exited: its exit report, or - sooner, without a hop through the
 * launcher server - the holder turning into a zombie, which it does only after leaving its
 * namespaces (so the sandbox's mounts are released).
 */
async function holderGone(holder: HolderHandle, startTime: string | undefined, timeoutMs: number): Promise<void> {
  const deadline = performance.now() + timeoutMs;
  let timer: NodeJS.Timeout | undefined;
  const poll = new Promise<void>((resolve) => {
    const tick = (): void => {
      if (holder.hasExited || !sameProcessAlive(holder.pid, startTime) || performance.now() > deadline) resolve();
      else timer = setTimeout(tick, 1);
    };
    tick();
  });
  await Promise.race([holder.exited, poll]);
  clearTimeout(timer);
}

function fileError(op: string, path: string, o: CommandOutcome): MinisandboxError {
  const why = o.status === 'ok' ? o.stderr.trim().slice(-300) : `${o.status}${o.error === undefined ? '' : `: ${o.error}`}`;
  return new MinisandboxError('SANDBOX_FILE', `cannot ${op} ${path} in the sandbox: ${why}`, {
    hint: 'check the path exists (for reads) and that the sandbox is alive; paths are resolved inside the sandbox',
  });
}

async function readHolderInfo(holder: ChildProcess, timeoutMs: number): Promise<{ initPid: number; stderr: string }> {
  let info = '';
  let stdout = '';
  let stderr = '';
  holder.stderr!.on('data', (c: Buffer) => {
    if (stderr.length < 8192) stderr += c.toString('utf8');
  });
  return new Promise((resolve, reject) => {
    const done = (): void => {
      const m = /"child-pid"\s*:\s*(\d+)/.exec(info);
      if (m !== null && stdout.includes('ready\n')) {
        cleanup();
        resolve({ initPid: Number(m[1]), stderr });
      }
    };
    const onExit = (code: number | null): void => {
      // Let stderr drain before reporting.
      setTimeout(() => {
        cleanup();
        reject(
          new SandboxStartError(
            `sandbox holder exited (code ${code}) before the sandbox was ready: ${stderr.trim().slice(-800) || 'no error output'}`,
            startHint(stderr),
          ),
        );
      }, 20);
    };
    const timer = setTimeout(() => {
      cleanup();
      reject(new SandboxStartError(`sandbox did not start within ${timeoutMs} ms: ${stderr.trim().slice(-800)}`, 'the host may be overloaded; retry'));
    }, timeoutMs);
    const cleanup = (): void => {
      clearTimeout(timer);
      holder.off('exit', onExit);
    };
    (holder.stdio[3] as NodeJS.ReadableStream).on('data', (c: Buffer) => {
      info += c.toString('utf8');
      done();
    });
    holder.stdout!.on('data', (c: Buffer) => {
      stdout += c.toString('utf8');
      done();
    });
    holder.on('exit', onExit);
    holder.on('error', (e) => {
      cleanup();
      reject(
        new SandboxStartError(
          `cannot start the sandbox holder: ${String(e)}`,
          'the native launcher could not run: delete native/build/ to recompile it (needs gcc)',
        ),
      );
    });
  });
}

function startHint(stderr: string): string {
  if (/newuidmap|newgidmap|uid_map|gid_map/.test(stderr))
    return (
      'the subordinate id map could not be written: check /etc/subuid and /etc/subgid hold ' +
      'a range for this user and that newuidmap/newgidmap (Debian `uidmap`) are setuid root'
    );
  if (/idmapped|open_tree|mount_setattr/.test(stderr))
    return 'the layers could not be mounted idmapped: check the layer dirs exist; MINISANDBOX_IDMAP=0 falls back to layers laid out shifted for sandboxes';
  if (/overlay|lowerdir/.test(stderr))
    return 'the overlay mount failed: layer dirs must exist, be searchable by the sandbox ids and be owned by the shifted ids (see shiftCopyTree)';
  if (/Permission denied/.test(stderr)) return 'the state dir and layer dirs must be searchable (o+x) by the subordinate ids the sandbox runs as';
  if (/\/bin\/sh/.test(stderr)) return 'the environment has no /bin/sh; sandboxes need one';
  return 'see the error output above';
}

/** Creates and starts a sandbox over the given layers. */
export async function createSandbox(input: SandboxOptions, hooks: CreateHooks = {}): Promise<Sandbox> {
  return startSandbox(SandboxOptionsSchema.parse(input), hooks, undefined);
}

/**
 * A holder and its pid 1 as the state file records them: their start times tell each apart from a
 * later process that reuses its pid (pid 1 can outlive its holder), so a reap kills only them.
 */
function recordedChain(h: HolderHandle): Pick<SandboxState, 'holderPid' | 'holderStartTime' | 'initPid' | 'initStartTime'> {
  return { holderPid: h.pid, holderStartTime: processStartTime(h.pid), initPid: h.initPid, initStartTime: processStartTime(h.initPid) };
}

async function startSandbox(opts: ParsedOptions, hooks: CreateHooks, forkFrom: Sandbox | undefined, forkedFrom = forkFrom?.id): Promise<Sandbox> {
  // every command gets the sandbox's environment: one the kernel could not exec with a command is refused now
  checkEnvLeavesRoom(commandEnv(opts.config.env));
  const host = hooks.host ?? (await probeHost());
  const warn = hooks.warn ?? ((m: string) => process.emitWarning(m, 'MinisandboxWarning'));
  const { id, state, cgroup, unenforced, rlimits, spec } = await prepareSandbox(opts, host, warn, {
    forkedFrom,
    fromTar: forkFrom !== undefined,
    holdable: true,
  });
  let holder: HolderHandle | undefined;
  const sp: { c?: ChildProcess } = {};
  try {
    holder = await startHolder(spec, forkFrom, (c) => {
      sp.c = c;
    });
    mark('start: holder ready');
    Object.assign(state, recordedChain(holder));
    writeState(opts.stateDir, state);
    if (state.idSlot !== undefined) recordIdRangeHolder({ path: state.idSlot }, id, holder.pid, state.holderStartTime);
    const sb = new Sandbox(state, opts, host, holder, cgroup, rlimits, hooks, unenforced, spec);
    await hooks.onCreated?.(state);
    mark('start: lease taken');
    // once for its current lower dirs, once for its creation ones (see doDestroy)
    retainFrozenLowers(opts.lowerDirs);
    retainFrozenLowers(opts.lowerDirs);
    // in the background: the create answers without waiting for it
    if (opts.prewarmReset) sb.prewarmReset();
    return sb;
  } catch (e) {
    holder?.kill();
    sp.c?.kill('SIGKILL');
    if (holder !== undefined) state.holderPid = holder.pid;
    else if (sp.c?.pid !== undefined) state.holderPid = sp.c.pid;
    await endSandbox(opts.stateDir, state, cgroup);
    if (e instanceof MinisandboxError) throw e;
    throw new SandboxStartError(
      `cannot create sandbox: ${e instanceof Error ? (e.stack ?? e.message) : String(e)}`,
      'see the cause; run probeHost() to check the host',
    );
  }
}

/** Pipes a tar of the source's upper dir (read inside its mount namespace) into the new holder's fd 4. */
async function streamUpper(src: Sandbox, holder: ChildProcess): Promise<void> {
  const argv = forkSourceTarCommand(src.state.holderPid, src.state.upperDir);
  const tar = spawn(argv[0]!, argv.slice(1), { stdio: ['ignore', 'pipe', 'pipe'], env: { PATH: HOST_PATH } });
  let err = '';
  tar.stderr!.on('data', (c: Buffer) => {
    if (err.length < 4096) err += c.toString('utf8');
  });
  // The holder's own complaints while it unpacks, kept for the message if it dies meanwhile (and
  // read, so that a chatty holder never blocks on a full stderr pipe and stalls the stream).
  let holderErr = '';
  const onHolderErr = (c: Buffer): void => {
    if (holderErr.length < 4096) holderErr += c.toString('utf8');
  };
  holder.stderr!.on('data', onHolderErr);
  // A holder that dies mid-stream may leave the pipe's read end open in a child of its own: the
  // tar would block on a full pipe forever. Its exit ends the stream instead.
  let holderExited = false;
  const onHolderExit = (): void => {
    holderExited = true;
    tar.kill('SIGKILL');
  };
  holder.once('exit', onHolderExit);
  const sink = holder.stdio[4] as NodeJS.WritableStream;
  sink.on('error', () => undefined);
  tar.stdout!.pipe(sink);
  const code = await new Promise<number | null>((resolve) => {
    tar.on('error', () => resolve(null));
    tar.on('close', (c) => resolve(c));
  });
  holder.off('exit', onHolderExit);
  holder.stderr!.off('data', onHolderErr);
  if (holderExited)
    throw new SandboxStartError(
      `fork: the new sandbox's holder exited while it received the source's files: ${holderErr.trim().slice(-800) || 'no error output'}`,
      startHint(holderErr),
    );
  if (code !== 0)
    throw new SandboxStartError(`fork: reading the source sandbox's upper dir failed: ${err.trim()}`, 'the source sandbox must be alive during fork');
}

/**
 * Branches a sandbox's current filesystem state into n new sandboxes (lower layers shared, the
 * upper dir copied). Quiesce the source (no command running) for a consistent snapshot. The
 * streaming fork: each child reads the whole upper again. The library and the server fork with
 * forkSandboxShared; this one is bench/fork-reset.ts's baseline.
 */
export async function forkSandbox(src: Sandbox, n: number, hooks: CreateHooks = {}): Promise<Sandbox[]> {
  if (!src.alive) throw new MinisandboxError('SANDBOX_DESTROYED', `cannot fork destroyed sandbox ${src.id}`, { hint: 'fork before destroying' });
  if (!Number.isInteger(n) || n < 1) throw new InvalidInputError(`fork count must be a positive integer, got ${n}`);
  const out: Sandbox[] = [];
  try {
    for (let i = 0; i < n; i++) {
      const opts: ParsedOptions = { ...src.options, id: undefined, prewarmReset: false };
      delete opts.id;
      out.push(await startSandbox(opts, { host: src.host, ...hooks }, src));
    }
  } catch (e) {
    await Promise.all(out.map((s) => s.destroy()));
    throw e;
  }
  return out;
}

/** A child of a fork, or why it could not start. */
export type ForkResult = { ok: true; sandbox: Sandbox } | { ok: false; error: unknown };

/**
 * Branches a sandbox's current state into n children that share one frozen copy of its upper dir
 * as their top lower layer (see frozen.ts), each with an empty upper of its own: the parent's
 * writes are read once, with its processes stopped for the copy, and each child starts like a new
 * sandbox. A child's reset() goes back to this forked state. Each child is reported on its own.
 */
export async function forkSandboxShared(src: Sandbox, n: number, hooks: CreateHooks = {}): Promise<ForkResult[]> {
  if (!src.alive) throw new MinisandboxError('SANDBOX_DESTROYED', `cannot fork destroyed sandbox ${src.id}`, { hint: 'fork before destroying' });
  if (!Number.isInteger(n) || n < 1) throw new InvalidInputError(`fork count must be a positive integer, got ${n}`);
  const frozen = await freezeUpper(src.options.stateDir, src.state, src.host.isRoot);
  // held for the children's starts, so a child failing early does not remove it under the others
  retainFrozenLowers([frozen]);
  try {
    const lowerDirs = [...src.state.lowerDirs, frozen];
    const settled = await Promise.allSettled(
      Array.from({ length: n }, async () => {
        const opts: ParsedOptions = { ...src.options, lowerDirs, prewarmReset: false };
        delete opts.id;
        const child = await startSandbox(opts, { host: src.host, ...hooks }, undefined, src.id);
        child.origin = child.creationOrigin = src.origin;
        return child;
      }),
    );
    return settled.map((r) => (r.status === 'fulfilled' ? { ok: true, sandbox: r.value } : { ok: false, error: r.reason as unknown }));
  } finally {
    await releaseFrozenLowers([frozen], src.state.idMap);
  }
}
