/**
 * Holders: the process that keeps a sandbox's namespaces, started either by a long-lived
 * `sandbox-launch serve` (the normal path: a message instead of a spawn, since forking the large
 * runtime process was the biggest single cost of a sandbox start) or spawned directly (forks,
 * which stream the source's upper dir into the new holder).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import type { Socket } from 'node:net';
import { MinisandboxError } from '../errors.js';
import { HOST_PATH } from './commands.js';

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
    private readonly server: LauncherServer,
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
    for (const pid of [this.initPid, this.pid]) {
      try {
        process.kill(pid, 'SIGKILL');
      } catch {
        // gone already
      }
    }
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
  private lineBuf = '';
  private stderr = '';
  private seq = 0;
  private refd = true;
  dead = false;

  constructor(launcher: string) {
    this.child = spawn(launcher, ['serve'], { stdio: ['pipe', 'pipe', 'pipe'], env: { PATH: HOST_PATH } });
    this.child.stdin!.on('error', () => undefined);
    this.child.stdout!.setEncoding('utf8');
    this.child.stdout!.on('data', (chunk: string) => this.onData(chunk));
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

  private send(fields: string[]): void {
    for (const f of fields) {
      if (f.includes('\0')) throw new MinisandboxError('SANDBOX_START', 'a sandbox argument contains a NUL byte', { hint: 'paths, hostnames and workdirs cannot contain NUL' });
    }
    this.child.stdin!.write(`${fields.length}\0${fields.join('\0')}\0`);
  }

  private onData(chunk: string): void {
    this.lineBuf += chunk;
    let nl: number;
    while ((nl = this.lineBuf.indexOf('\n')) >= 0) {
      const line = this.lineBuf.slice(0, nl);
      this.lineBuf = this.lineBuf.slice(nl + 1);
      this.onEvent(line);
    }
  }

  private onEvent(line: string): void {
    const [kind, id = '', a = '', b = ''] = line.split(' ', 4);
    if (kind === 'R') {
      const p = this.pending.get(id);
      const holder = new ServedHolder(id, Number(a), Number(b), this);
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
    // Its holders die with it (PR_SET_PDEATHSIG): their sandboxes are gone.
    for (const h of this.live.values()) h.latch.fire();
    this.live.clear();
  }

  /** Keeps the runtime's event loop alive exactly while something is starting or running. */
  private updateRef(): void {
    const want = !this.dead && (this.pending.size > 0 || this.live.size > 0);
    if (want === this.refd) return;
    this.refd = want;
    const handles = [this.child, this.child.stdin as unknown as Socket, this.child.stdout as unknown as Socket, this.child.stderr as unknown as Socket];
    for (const h of handles) {
      if (want) h.ref();
      else h.unref();
    }
  }
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
      try {
        process.kill(initPid, 'SIGKILL');
      } catch {
        // gone
      }
      child.kill('SIGKILL');
    },
  };
}
