/**
 * `minisandbox serve` in a process of its own (bin/minisandbox, from the sources), as a trainer
 * runs it, over a ServerFixture's registry and store: for tests about what the process does as a
 * whole, such as how much memory it takes (its peak RSS, VmHWM, read from /proc).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { createInterface } from 'node:readline';
import type { ServerFixture } from './server-fixture.js';

const BIN = resolve(import.meta.dirname, '../../bin/minisandbox');

/** A field of /proc/<pid>/status given in kB (VmHWM, VmRSS), in bytes; 0 for a process that is gone. */
export function procStatusBytes(pid: number, field: 'VmHWM' | 'VmRSS'): number {
  let text = '';
  try {
    text = readFileSync(`/proc/${pid}/status`, 'utf8');
  } catch {
    return 0;
  }
  const m = new RegExp(`^${field}:\\s+(\\d+) kB`, 'm').exec(text);
  return m === null ? 0 : Number(m[1]) * 1024;
}

export interface ProcRes {
  status: number;
  headers: Headers;
  text: string;
  json: () => Record<string, unknown>;
}

export class ServeProcess {
  private constructor(
    readonly child: ChildProcess,
    readonly url: string,
    readonly token: string,
    private readonly exited: Promise<number | null>,
    /** What it wrote on stderr (its request log), for a failure's message. */
    readonly stderr: () => string,
  ) {}

  /** Starts serve over the fixture's registry and store with `args` added, once it listens. */
  static async start(fx: ServerFixture, args: string[] = []): Promise<ServeProcess> {
    const tokenFile = join(fx.work, 'proc-token');
    const child = spawn(
      BIN,
      ['--registry', join(fx.work, 'registry'), '--store', fx.store.root, 'serve', '--listen', '127.0.0.1:0', '--token-file', tokenFile, ...args],
      { stdio: ['ignore', 'pipe', 'pipe'] },
    );
    let err = '';
    child.stderr!.on('data', (c: Buffer) => {
      err = (err + c.toString('utf8')).slice(-20_000);
    });
    const exited = new Promise<number | null>((r) => child.once('exit', (code) => r(code)));
    const line = await Promise.race([
      new Promise<string>((r) => createInterface({ input: child.stdout! }).once('line', r)),
      exited.then((code) => {
        throw new Error(`serve exited (${code}) before it listened: ${err.slice(-2000)}`);
      }),
    ]);
    const { listening } = JSON.parse(line) as { listening: string };
    return new ServeProcess(child, listening, readFileSync(tokenFile, 'utf8').trim(), exited, () => err);
  }

  get pid(): number {
    return this.child.pid!;
  }

  /** The most memory the process has held at once since it started (VmHWM), in bytes. */
  peakRss(): number {
    return procStatusBytes(this.pid, 'VmHWM');
  }

  get alive(): boolean {
    return this.child.exitCode === null && this.child.signalCode === null;
  }

  /** A request; `raw` a body as is (with its own content-type in `headers`), else `body` as JSON. */
  async call(
    method: string,
    path: string,
    body?: unknown,
    o: { headers?: Record<string, string>; raw?: Uint8Array | string | FormData; signal?: AbortSignal } = {},
  ): Promise<ProcRes> {
    const headers: Record<string, string> = { authorization: `Bearer ${this.token}`, ...(o.headers ?? {}) };
    let payload: string | Uint8Array | FormData | undefined = o.raw;
    if (body !== undefined) {
      payload = JSON.stringify(body);
      headers['content-type'] = 'application/json';
    }
    const r = await fetch(`${this.url}${path}`, {
      method,
      headers,
      ...(payload === undefined ? {} : { body: payload as BodyInit }),
      ...(o.signal === undefined ? {} : { signal: o.signal }),
    });
    const text = Buffer.from(await r.arrayBuffer()).toString('utf8');
    return { status: r.status, headers: r.headers, text, json: () => JSON.parse(text) as Record<string, unknown> };
  }

  /** Creates a sandbox of `ref` and returns its id. */
  async create(ref: string): Promise<string> {
    const r = await this.call('POST', '/v1/sandboxes', { ref });
    if (r.status !== 201) throw new Error(`create: ${r.status} ${r.text}`);
    return r.json().id as string;
  }

  /** SIGTERM (it destroys its sandboxes), and its exit code. */
  async stop(): Promise<number | null> {
    if (this.alive) this.child.kill('SIGTERM');
    return this.exited;
  }
}
