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
import { enterArgs, HOST_PATH, type EnterSpec } from './commands.js';
import { encodeInput, encodeRequest, EventReader, INPUT_PIECE, INPUT_WINDOW, type LauncherEvent } from './launcher-protocol.js';
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
  /** Why it exited where nothing of the sandbox's did it: its launcher server died. */
  readonly lostBecause: string | undefined;
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
  lostBecause: string | undefined;
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
  private readonly events = new EventReader(
    (e) => this.onEvent(e),
    (line) => this.note(`the runtime skipped an event line it did not understand: ${JSON.stringify(line.slice(0, 200))}\n`),
  );
  private stderr = '';
  private seq = 0;
  private refd = true;
  dead = false;

  constructor(launcher: string) {
    this.child = spawn(launcher, ['serve'], { stdio: ['pipe', 'pipe', 'pipe'], env: { PATH: HOST_PATH } });
    this.child.stdin!.on('error', () => undefined);
    this.child.stdout!.on('data', (chunk: Buffer) => this.events.push(chunk));
    this.child.stderr!.on('data', (c: Buffer) => this.note(c.toString('utf8')));
    this.child.on('error', (e) => this.onDeath(String(e)));
    this.child.on('exit', (code, signal) => this.onDeath(`exited (${code ?? signal})`));
    this.updateRef();
  }

  /** Starts a holder with the arguments of `sandbox-launch holder` (which must use --info-fd 3). */
  start(args: string[], timeoutMs: number): Promise<HolderStart> {
    if (this.dead) return Promise.resolve({ ok: false, status: null, stderr: `the sandbox launcher server is gone: ${this.stderr.trim()}` });
    const id = `h${++this.seq}`;
    // before anything is registered: a refusal must leave no timer behind
    const record = encodeRequest(['S', id, ...args]);
    return new Promise((resolve) => {
      const timer = setTimeout(() => {
        this.pending.delete(id);
        this.kill(id);
        this.updateRef();
        resolve({ ok: false, status: null, stderr: `the sandbox did not start within ${timeoutMs} ms (the host may be overloaded; retry)` });
      }, timeoutMs);
      this.pending.set(id, { resolve, timer });
      this.updateRef();
      this.child.stdin!.write(record);
    });
  }

  kill(id: string): void {
    if (!this.dead) this.child.stdin!.write(encodeRequest(['K', id]));
  }

  /**
   * Runs `sandbox-launch enter` (its arguments after the mode) with stdio relayed: stdout,
   * stderr and the status fd 3 as streams, stdin if asked for.
   */
  exec(args: string[], opts: { stdin: boolean }): ServedProcess {
    const id = `x${++this.seq}`;
    const record = encodeRequest(['X', id, opts.stdin ? '1' : '0', ...args]);
    const proc = new ServedProcess(id, this, opts.stdin);
    if (this.dead) {
      queueMicrotask(() => proc.onGone(`the sandbox launcher server is gone: ${this.stderr.trim()}`));
      return proc;
    }
    this.procs.set(id, proc);
    this.updateRef();
    this.child.stdin!.write(record);
    return proc;
  }

  /** @internal a piece of a served process's stdin (at most INPUT_PIECE bytes), or its end (undefined). */
  input(id: string, data: Buffer | undefined): void {
    if (this.dead) return;
    this.child.stdin!.write(data === undefined ? encodeRequest(['C', id]) : encodeInput(id, data));
  }

  /** What the server said on stderr, the last 8 KiB (why it died comes last; what it dropped before). */
  private note(text: string): void {
    this.stderr = (this.stderr + text).slice(-8192);
  }

  /** An event for an id it does not know (a request that timed out meanwhile, say) changes nothing. */
  private onEvent(e: LauncherEvent): void {
    switch (e.kind) {
      case 'O':
        this.procs.get(e.id)?.onOutput(e.stream, e.data);
        return;
      case 'W':
        this.procs.get(e.id)?.onWritten(e.bytes);
        return;
      case 'P':
        this.procs.get(e.id)?.onPid(e.pid);
        break;
      case 'D':
        this.procs.get(e.id)?.onExit(e.code, e.signal);
        break;
      case 'Z': {
        const p = this.procs.get(e.id);
        this.procs.delete(e.id);
        p?.onClose();
        break;
      }
      case 'R': {
        const p = this.pending.get(e.id);
        if (p === undefined) {
          // Timed out meanwhile: already asked to die (a live one's id is not pending: left alone).
          if (!this.live.has(e.id)) this.kill(e.id);
          return;
        }
        this.pending.delete(e.id);
        clearTimeout(p.timer);
        const holder = new ServedHolder(e.id, e.holderPid, e.initPid);
        this.live.set(e.id, holder);
        p.resolve({ ok: true, holder });
        break;
      }
      case 'E': {
        const p = this.pending.get(e.id);
        this.pending.delete(e.id);
        if (p !== undefined) {
          clearTimeout(p.timer);
          p.resolve({ ok: false, status: e.status, stderr: e.message });
        }
        break;
      }
      case 'X': {
        const h = this.live.get(e.id);
        this.live.delete(e.id);
        h?.latch.fire();
        break;
      }
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
    const lost = `the launcher server holding it ${why}${this.stderr.trim() === '' ? '' : `: ${this.stderr.trim().slice(-300)}`}`;
    for (const h of this.live.values()) {
      h.lostBecause = lost;
      h.latch.fire();
    }
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
  /** Input sent and not yet acknowledged (W): at most INPUT_WINDOW, all the server holds for it. */
  private inFlight = 0;
  /** The chunk being sent, from `off`, and the Writable's callback once it is all sent. */
  private sending: { data: Buffer; off: number; done: () => void } | undefined;
  private finishing: (() => void) | undefined;

  constructor(
    readonly id: string,
    private readonly server: LauncherServer,
    withStdin: boolean,
  ) {
    super();
    this.stdin = withStdin
      ? new Writable({
          write: (chunk: Buffer, _enc, cb) => {
            this.sending = { data: chunk, off: 0, done: () => cb() };
            this.pump();
          },
          final: (cb) => {
            this.finishing = () => cb();
            this.pump();
          },
        })
      : null;
  }

  /** Sends input as far as the window allows; the end once all of it is sent. */
  private pump(): void {
    const s = this.sending;
    if (s !== undefined && this.ended) {
      // the command is gone: what it did not read is dropped, as the server drops it
      this.sending = undefined;
      s.done();
    }
    while (this.sending !== undefined && this.inFlight < INPUT_WINDOW) {
      const c = this.sending;
      const n = Math.min(INPUT_PIECE, INPUT_WINDOW - this.inFlight, c.data.length - c.off);
      this.server.input(this.id, c.data.subarray(c.off, c.off + n));
      this.inFlight += n;
      c.off += n;
      if (c.off === c.data.length) {
        this.sending = undefined;
        c.done();
      }
    }
    if (this.sending === undefined && this.finishing !== undefined) {
      const f = this.finishing;
      this.finishing = undefined;
      if (!this.ended) this.server.input(this.id, undefined);
      f();
    }
  }

  /** @internal the server wrote (or dropped) `bytes` of its input */
  onWritten(bytes: number): void {
    this.inFlight = Math.max(0, this.inFlight - bytes);
    this.pump();
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
  onOutput(stream: 1 | 2 | 3, data: Buffer): void {
    const s = stream === 1 ? this.stdout : stream === 2 ? this.stderr : this.status;
    s.write(Buffer.from(data));
  }
  /** @internal */
  onExit(code: number, signal: number): void {
    if (this.ended) return;
    this.ended = true;
    this.exitCode = code >= 0 ? code : null;
    this.signalCode = signal > 0 ? (SIGNALS[signal] ?? 'SIGKILL') : null;
    this.pump();
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
    lostBecause: undefined,
    kill: () => {
      child.stdin?.destroy();
      trySignal(initPid, 'SIGKILL');
      child.kill('SIGKILL');
    },
  };
}
