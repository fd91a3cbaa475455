/**
 * The runtime's side of `sandbox-launch serve` (see native/sandbox-launch.c): one long-lived
 * server per runtime process starts sandbox holders and runs commands in sandboxes, relaying
 * their stdio. Starting either is a message instead of a spawn: forking the large runtime process
 * was the biggest single cost of a sandbox start and of every command. Holders of forks (which
 * stream the source's upper dir in) and interactive shells (which need the terminal) are still
 * spawned directly.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { EventEmitter } from 'node:events';
import type { Socket } from 'node:net';
import { PassThrough, Writable, type Readable } from 'node:stream';
import { MinisandboxError } from '../errors.js';
import { enterArgs, HOST_PATH, type EnterSpec } from './commands.js';
import { trySignal } from './proc.js';

export interface HolderHandle {
  readonly pid: number;
  readonly initPid: number;
  /** Resolves once the holder has exited: the sandbox's namespaces and mounts are gone. */
  readonly exited: Promise<void>;
  readonly hasExited: boolean;
  /** Called once when the holder exits (for whatever reason). */
  onExit(cb: () => void): void;
  /** SIGKILLs the holder and the sandbox's init. */
  kill(): void;
}

export type HolderStart = { ok: true; holder: HolderHandle } | { ok: false; status: number | null; stderr: string };

class ExitLatch {
  done = false;
  private readonly callbacks: (() => void)[] = [];
  readonly promise: Promise<void>;
  private resolve!: () => void;
  constructor() {
    this.promise = new Promise((r) => (this.resolve = r));
  }
  on(cb: () => void): void {
    if (this.done) queueMicrotask(cb);
    else this.callbacks.push(cb);
  }
  fire(): void {
    if (this.done) return;
    this.done = true;
    this.resolve();
    for (const cb of this.callbacks.splice(0)) cb();
  }
}

class ServedHolder implements HolderHandle {
  readonly latch = new ExitLatch();
  constructor(
    readonly id: string,
    readonly pid: number,
    readonly initPid: number,
  ) {}
  get exited(): Promise<void> {
    return this.latch.promise;
  }
  get hasExited(): boolean {
    return this.latch.done;
  }
  onExit(cb: () => void): void {
    this.latch.on(cb);
  }
  kill(): void {
    if (this.latch.done) return;
    // Directly, not through the server: one scheduling hop less on every destroy. The holder is
    // the server's unreaped child until its exit is reported, so its pid cannot have been reused.
    trySignal(this.initPid, 'SIGKILL');
    trySignal(this.pid, 'SIGKILL');
  }
}

interface Pending {
  resolve: (r: HolderStart) => void;
  timer: NodeJS.Timeout;
}

/**
 * One `sandbox-launch serve` process. It keeps the runtime alive only while it holds sandboxes or
 * starts; it ends (and every holder with it) when the runtime exits and its stdin closes.
 */
export class LauncherServer {
  private readonly child: ChildProcess;
  private readonly pending = new Map<string, Pending>();
  private readonly live = new Map<string, ServedHolder>();
  private readonly procs = new Map<string, ServedProcess>();
  private inBuf: Buffer = Buffer.alloc(0);
  private stderr = '';
  private seq = 0;
  private refd = true;
  dead = false;

  constructor(launcher: string) {
    this.child = spawn(launcher, ['serve'], { stdio: ['pipe', 'pipe', 'pipe'], env: { PATH: HOST_PATH } });
    this.child.stdin!.on('error', () => undefined);
    this.child.stdout!.on('data', (chunk: Buffer) => this.onData(chunk));
    this.child.stderr!.on('data', (c: Buffer) => {
      if (this.stderr.length < 8192) this.stderr += c.toString('utf8');
    });
    this.child.on('error', (e) => this.onDeath(String(e)));
    this.child.on('exit', (code, signal) => this.onDeath(`exited (${code ?? signal})`));
    this.updateRef();
  }

  /** Starts a holder with the arguments of `sandbox-launch holder` (which must use --info-fd 3). */
  start(args: string[], timeoutMs: number): Promise<HolderStart> {
    if (this.dead) return Promise.resolve({ ok: false, status: null, stderr: `the sandbox launcher server is gone: ${this.stderr.trim()}` });
    const id = `h${++this.seq}`;
    checkFields(args); // before anything is registered: a refusal must leave no timer behind
    return new Promise((resolve) => {
      const timer = setTimeout(() => {
        this.pending.delete(id);
        this.kill(id);
        this.updateRef();
        resolve({ ok: false, status: null, stderr: `the sandbox did not start within ${timeoutMs} ms (the host may be overloaded; retry)` });
      }, timeoutMs);
      this.pending.set(id, { resolve, timer });
      this.updateRef();
      this.send(['S', id, ...args]);
    });
  }

  kill(id: string): void {
    if (!this.dead) this.send(['K', id]);
  }

  /**
   * Runs `sandbox-launch enter` (its arguments after the mode) with stdio relayed: stdout,
   * stderr and the status fd 3 as streams, stdin if asked for.
   */
  exec(args: string[], opts: { stdin: boolean }): ServedProcess {
    const id = `x${++this.seq}`;
    checkFields(args);
    const proc = new ServedProcess(id, this, opts.stdin);
    if (this.dead) {
      queueMicrotask(() => proc.onGone(`the sandbox launcher server is gone: ${this.stderr.trim()}`));
      return proc;
    }
    this.procs.set(id, proc);
    this.updateRef();
    this.send(['X', id, opts.stdin ? '1' : '0', ...args]);
    return proc;
  }

  /** @internal input for a served process's stdin (an empty `data` with `close` ends it). */
  input(id: string, data: Buffer | undefined): void {
    if (this.dead) return;
    if (data === undefined) this.send(['C', id]);
    else this.child.stdin!.write(Buffer.concat([Buffer.from(`3\0I\0${id}\0${data.length}\0`), data]));
  }

  private send(fields: string[]): void {
    checkFields(fields);
    this.child.stdin!.write(`${fields.length}\0${fields.join('\0')}\0`);
  }

  /** Events: a header line each; `O` headers are followed by that many raw bytes. */
  private onData(chunk: Buffer): void {
    this.inBuf = this.inBuf.length === 0 ? chunk : Buffer.concat([this.inBuf, chunk]);
    let off = 0;
    for (;;) {
      const nl = this.inBuf.indexOf(10, off);
      if (nl < 0) break;
      const line = this.inBuf.toString('latin1', off, nl);
      if (line.startsWith('O ')) {
        const [, id = '', stream = '', len = ''] = line.split(' ');
        const n = Number(len);
        if (this.inBuf.length - (nl + 1) < n) break;
        this.procs.get(id)?.onOutput(Number(stream), this.inBuf.subarray(nl + 1, nl + 1 + n));
        off = nl + 1 + n;
        continue;
      }
      off = nl + 1;
      this.onEvent(Buffer.from(line, 'latin1').toString('utf8'));
    }
    this.inBuf = off >= this.inBuf.length ? Buffer.alloc(0) : Buffer.from(this.inBuf.subarray(off));
  }

  private onEvent(line: string): void {
    const [kind, id = '', a = '', b = ''] = line.split(' ', 4);
    if (kind === 'P') {
      this.procs.get(id)?.onPid(Number(a));
    } else if (kind === 'D') {
      this.procs.get(id)?.onExit(Number(a), Number(b));
    } else if (kind === 'Z') {
      const p = this.procs.get(id);
      this.procs.delete(id);
      p?.onClose();
    } else if (kind === 'R') {
      const p = this.pending.get(id);
      const holder = new ServedHolder(id, Number(a), Number(b));
      if (p === undefined) {
        // Timed out meanwhile: already asked to die.
        this.kill(id);
        return;
      }
      this.pending.delete(id);
      clearTimeout(p.timer);
      this.live.set(id, holder);
      p.resolve({ ok: true, holder });
    } else if (kind === 'E') {
      const p = this.pending.get(id);
      this.pending.delete(id);
      if (p !== undefined) {
        clearTimeout(p.timer);
        p.resolve({ ok: false, status: Number(a), stderr: line.split(' ').slice(3).join(' ') });
      }
    } else if (kind === 'X') {
      const h = this.live.get(id);
      this.live.delete(id);
      h?.latch.fire();
    }
    this.updateRef();
  }

  private onDeath(why: string): void {
    if (this.dead) return;
    this.dead = true;
    for (const p of this.pending.values()) {
      clearTimeout(p.timer);
      p.resolve({ ok: false, status: null, stderr: `the sandbox launcher server ${why}: ${this.stderr.trim()}` });
    }
    this.pending.clear();
    // Its holders and commands die with it (PR_SET_PDEATHSIG): their sandboxes are gone.
    for (const h of this.live.values()) h.latch.fire();
    this.live.clear();
    for (const p of this.procs.values()) p.onGone(`the sandbox launcher server ${why}`);
    this.procs.clear();
  }

  /** Keeps the runtime's event loop alive exactly while something is starting or running. */
  private updateRef(): void {
    const want = !this.dead && (this.pending.size > 0 || this.live.size > 0 || this.procs.size > 0);
    if (want === this.refd) return;
    this.refd = want;
    const handles = [this.child, this.child.stdin as unknown as Socket, this.child.stdout as unknown as Socket, this.child.stderr as unknown as Socket];
    for (const h of handles) {
      if (want) h.ref();
      else h.unref();
    }
  }
}

/** Fields are NUL-terminated on the wire. */
function checkFields(fields: string[]): void {
  for (const f of fields) {
    if (f.includes('\0'))
      throw new MinisandboxError('SANDBOX_START', 'a sandbox argument contains a NUL byte', {
        hint: 'paths, hostnames, workdirs, commands and environment variables cannot contain NUL',
      });
  }
}

const SIGNALS: Record<number, NodeJS.Signals> = {
  1: 'SIGHUP',
  2: 'SIGINT',
  3: 'SIGQUIT',
  6: 'SIGABRT',
  9: 'SIGKILL',
  13: 'SIGPIPE',
  14: 'SIGALRM',
  15: 'SIGTERM',
};

/**
 * A command run by the server, shaped like the parts of a ChildProcess the runner and sessions
 * use: stdin/stdout/stderr streams, stdio[3] (the launcher's status fd), pid, kill, and the
 * 'exit' (process ended) and 'close' (and its output drained) events.
 */
export class ServedProcess extends EventEmitter {
  readonly stdout = new PassThrough();
  readonly stderr = new PassThrough();
  readonly status = new PassThrough();
  readonly stdin: Writable | null;
  pid: number | undefined;
  exitCode: number | null = null;
  signalCode: NodeJS.Signals | null = null;
  private pendingSignal: NodeJS.Signals | undefined;
  private ended = false;

  constructor(
    readonly id: string,
    server: LauncherServer,
    withStdin: boolean,
  ) {
    super();
    this.stdin = withStdin
      ? new Writable({
          write: (chunk: Buffer, _enc, cb) => {
            server.input(id, chunk);
            cb();
          },
          final: (cb) => {
            server.input(id, undefined);
            cb();
          },
        })
      : null;
  }

  get stdio(): [Writable | null, Readable, Readable, Readable] {
    return [this.stdin, this.stdout, this.stderr, this.status];
  }

  kill(signal: NodeJS.Signals = 'SIGTERM'): boolean {
    if (this.ended) return false;
    if (this.pid === undefined) {
      this.pendingSignal = signal;
      return true;
    }
    // Still the server's unreaped child until its exit is reported: the pid cannot be reused.
    return trySignal(this.pid, signal) === 'ok';
  }

  /** @internal */
  onPid(pid: number): void {
    this.pid = pid;
    if (this.pendingSignal !== undefined) this.kill(this.pendingSignal);
  }
  /** @internal */
  onOutput(stream: number, data: Buffer): void {
    const s = stream === 1 ? this.stdout : stream === 2 ? this.stderr : this.status;
    s.write(Buffer.from(data));
  }
  /** @internal */
  onExit(code: number, signal: number): void {
    if (this.ended) return;
    this.ended = true;
    this.exitCode = code >= 0 ? code : null;
    this.signalCode = signal > 0 ? (SIGNALS[signal] ?? 'SIGKILL') : null;
    this.emit('exit', this.exitCode, this.signalCode);
  }
  /** @internal */
  onClose(): void {
    for (const s of [this.stdout, this.stderr, this.status]) s.end();
    // 'close' after the streams have delivered what they hold, as for a child process.
    setImmediate(() => this.emit('close', this.exitCode, this.signalCode));
  }
  /** @internal the server died: the command died with it. */
  onGone(why: string): void {
    this.stderr.write(`\n${why}\n`);
    if (!this.ended) this.onExit(-1, 9);
    this.onClose();
  }
}

/** Runs an enter spec (a command or session shell) through the runtime's launcher server. */
export function enterServed(spec: EnterSpec, opts: { stdin: boolean }): ServedProcess {
  return launcherServer(spec.launcher).exec(enterArgs(spec), opts);
}

/**
 * The process-wide server for a launcher binary. A process resource like a connection pool: one
 * per runtime process is the point (a server per sandbox would be a spawn per sandbox again).
 */
const servers = new Map<string, LauncherServer>();

export function launcherServer(launcher: string): LauncherServer {
  let s = servers.get(launcher);
  if (s === undefined || s.dead) {
    s = new LauncherServer(launcher);
    servers.set(launcher, s);
  }
  return s;
}

/** A holder spawned directly by the runtime (used for forks); `initPid` comes from its info fd. */
export function spawnedHolder(child: ChildProcess, initPid: number): HolderHandle {
  const latch = new ExitLatch();
  if (child.exitCode !== null || child.signalCode !== null) latch.fire();
  else child.once('exit', () => latch.fire());
  return {
    pid: child.pid!,
    initPid,
    exited: latch.promise,
    get hasExited() {
      return latch.done;
    },
    onExit: (cb) => latch.on(cb),
    kill: () => {
      child.stdin?.destroy();
      trySignal(initPid, 'SIGKILL');
      child.kill('SIGKILL');
    },
  };
}
