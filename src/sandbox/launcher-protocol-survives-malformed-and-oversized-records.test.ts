/**
 * A bounded, seeded fuzz of the launcher server's protocol: a real `sandbox-launch serve` gets
 * batches of random and malformed records (random bytes, missing NULs, field counts from 0 to
 * huge, bad verbs, ids that are not ids, I records with bad lengths, requests for unknown ids,
 * records past the size limit, starts and commands with garbage arguments). After each batch the
 * server is alive, answered every start and command of the batch for its id, wrote only events
 * the runtime's reader understands, and still runs real commands in a real sandbox correctly,
 * stdin included. Its memory stays bounded throughout. A server out of file descriptors (many
 * commands at once) refuses the commands it cannot start, for their ids, and serves the rest.
 *
 * After garbage nothing can know where the next record begins, so each batch of it ends with a
 * run of NULs as long as the longest record the server waits for (recordLimits' field bound, or an
 * I payload): the server must be back in step after it, whatever the garbage left pending.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { busyboxSandboxEnv } from '../../test/helpers/busybox-sandbox-env.js';
import { eventually } from '../../test/helpers/eventually.js';
import { rng } from '../../test/helpers/rng.js';
import { enterArgs } from './commands.js';
import { encodeInput, encodeRequest, EventReader, INPUT_MAX, type LauncherEvent, recordLimits } from './launcher-protocol.js';
import type { Sandbox } from './sandbox.js';

const env = busyboxSandboxEnv();
let sb: Sandbox;
let server: ChildProcess;
const events: LauncherEvent[] = [];
const malformed: string[] = [];
let stderr = '';

beforeAll(async () => {
  sb = await env.create();
  server = spawn(env.host.tools.launcher, ['serve'], { stdio: ['pipe', 'pipe', 'pipe'] });
  server.stdin!.on('error', () => undefined); // a server that died is reported by until()
  const reader = new EventReader(
    (e) => events.push(e.kind === 'O' ? { ...e, data: Buffer.from(e.data) } : e),
    (line) => malformed.push(line),
  );
  server.stdout!.on('data', (c: Buffer) => reader.push(c));
  // read, or the server would block writing its notes of what it dropped
  server.stderr!.on('data', (c: Buffer) => {
    if (stderr.length < 1 << 16) stderr += c.toString();
  });
}, 300_000);
afterAll(async () => {
  server?.stdin?.end();
  await sb?.destroy();
});

const BATCHES = 20;
const RECORDS_PER_BATCH = 100;
const limits = recordLimits();

const send = (b: Buffer | string): Promise<void> => new Promise((done) => server.stdin!.write(b, () => done()));

/** Waits for `cond`; a server that exited meanwhile fails the test at once. */
function until(cond: () => boolean): Promise<void> {
  return eventually(() => {
    if (server.exitCode !== null || server.signalCode !== null)
      throw new Error(`the server exited (${server.exitCode ?? server.signalCode}): ${stderr.slice(-500)}`);
    return cond();
  });
}
const record = (fields: string[]): Buffer => Buffer.from(`${fields.length}\0${fields.map((f) => `${f}\0`).join('')}`);

/** Waits for the Z of command `id`; its stdout, stderr and exit code. */
async function ended(id: string): Promise<{ out: string; err: string; code: number | undefined }> {
  await until(() => events.some((e) => e.kind === 'Z' && e.id === id));
  const mine = events.filter((e) => e.id === id);
  const text = (stream: number) => Buffer.concat(mine.flatMap((e) => (e.kind === 'O' && e.stream === stream ? [e.data] : []))).toString();
  const d = mine.find((e) => e.kind === 'D');
  return { out: text(1), err: text(2), code: d?.kind === 'D' ? d.code : undefined };
}

/** A real command in the real sandbox through the fuzzed server, stdin included. */
async function realCommandsWork(n: number): Promise<void> {
  const echo = `real-echo-${n}`;
  await send(encodeRequest(['X', echo, '0', ...enterArgs(sb.enterSpec(['/bin/echo', `marker ${n}`]))]));
  const cat = `real-cat-${n}`;
  const input = Buffer.from(`input ${n}\n`.repeat(1000));
  await send(encodeRequest(['X', cat, '1', ...enterArgs(sb.enterSpec(['/bin/cat']))]));
  await send(encodeInput(cat, input.subarray(0, 5000)));
  await send(encodeInput(cat, input.subarray(5000)));
  await send(encodeRequest(['C', cat]));
  expect(await ended(echo)).toMatchObject({ out: `marker ${n}\n`, code: 0 });
  const c = await ended(cat);
  expect([c.out.length, c.code]).toEqual([input.length, 0]);
  expect(c.out).toBe(input.toString());
}

describe('the launcher protocol, fuzzed', () => {
  it(`survives ${BATCHES} batches of ${RECORDS_PER_BATCH} malformed records and still runs real commands after each`, async () => {
    const r = rng(0x5eed_25);
    const int = (n: number) => Math.floor(r() * n);
    const pick = <T>(xs: readonly T[]): T => xs[int(xs.length)]!;
    const bytes = (n: number) => Buffer.from(Array.from({ length: n }, () => int(256)));
    const token = () => pick(['', 'x', '--', '-', '--nope', '0', '1', 'ü', ' ', '\n', 'a b', '%s%n', bytes(int(20)).toString('latin1').replace(/\0/g, '')]);
    const fuzzId = (i: number) => pick([`f${i}`, `f${i}`, `f${i}`, '', 'bad id', 'x'.repeat(65), 'new\nline', 'f/1']);
    await realCommandsWork(-1);
    let seq = 0;
    for (let batch = 0; batch < BATCHES; batch++) {
      // garbage, then the NULs that put any reader back in step
      const garbage: Buffer[] = [];
      for (let i = 0; i < RECORDS_PER_BATCH / 2; i++) {
        const kind = int(6);
        if (kind === 0) garbage.push(bytes(int(300)));
        else if (kind === 1)
          garbage.push(Buffer.from(`${pick(['', '-1', '0', '1', 'abc', '99999999999999', String(limits.fields + 1), `${int(40)}`, ' 3'])}\0`));
        else if (kind === 2) garbage.push(Buffer.from(`${int(50) + 2}\0${pick(['S', 'X', 'I', 'Q', ''])}\0g${seq++}\0`));
        else if (kind === 3)
          garbage.push(
            Buffer.from(`3\0I\0g${seq++}\0${pick(['', 'x', '-5', String(INPUT_MAX + 1), String(int(5000))])}\0${bytes(int(100)).toString('latin1')}`, 'latin1'),
          );
        else if (kind === 4) garbage.push(Buffer.from('x'.repeat(int(100) + 12)));
        else garbage.push(record([pick(['S', 'X', 'I', 'C', 'K', 'Z', 'SS']), `g${seq++}`, ...Array.from({ length: int(10) }, token)]));
      }
      await send(Buffer.concat(garbage));
      await send(Buffer.alloc(limits.fields + INPUT_MAX + 16));

      // well-formed records with bad contents: every start and command among them is answered for its id
      const answered: string[] = [];
      const chunks: Buffer[] = [];
      for (let i = 0; i < RECORDS_PER_BATCH / 2; i++) {
        const id = fuzzId(seq++);
        const good = /^f\d+$/.test(id);
        const kind = int(7);
        if (kind === 0) chunks.push(record(['S', id, ...Array.from({ length: int(30) }, token)]));
        else if (kind === 1) chunks.push(record(['X', id, pick(['0', '1', '2', '', 'yes']), ...Array.from({ length: int(30) }, token)]));
        else if (kind === 2) chunks.push(record(['X', id]));
        else if (kind === 3) {
          const n = int(100);
          chunks.push(Buffer.concat([Buffer.from(`3\0I\0${id}\0${n}\0`), Buffer.alloc(n, 1)]));
        } else if (kind === 4) chunks.push(record([pick(['C', 'K', 'K', 'C']), id, ...(int(2) === 0 ? [] : ['extra'])]));
        else if (kind === 5) chunks.push(record(['X', id, '0', ...Array.from({ length: 600 + int(3000) }, () => 'a')]));
        else chunks.push(record([pick(['', 'Q', 'x', 'SX']), id]));
        if (good && kind <= 2) answered.push(id);
        if (good && kind === 5) answered.push(id);
      }
      // once in a while, a record past the size limit: refused for its id, skipped as it arrives
      if (batch % 8 === 3) {
        const id = `huge${batch}`;
        chunks.push(record(['X', id, '0', ...Array.from({ length: Math.ceil(limits.bytes / 60000) + 2 }, () => 'h'.repeat(60000))]));
        answered.push(id);
      }
      await send(Buffer.concat(chunks));
      await send(Buffer.alloc(limits.fields + INPUT_MAX + 16));
      await until(() => answered.every((id) => events.some((e) => (e.kind === 'E' || e.kind === 'Z') && e.id === id)));
      expect(server.exitCode).toBeNull();
      await realCommandsWork(batch);
    }
    // it only ever said what the runtime's reader understands
    expect(malformed).toEqual([]);
    expect(stderr).toMatch(/dropped a request/);
    const peakKiB = Number(/VmHWM:\s+(\d+)/.exec(readFileSync(`/proc/${server.pid}/status`, 'utf8'))?.[1]);
    // a held record is at most limits.bytes, its field table a few MiB more
    expect(peakKiB * 1024).toBeLessThan(limits.bytes * 4 + (32 << 20));
  });

  it('refuses the commands it has no file descriptors for, for their ids, and serves the others', async () => {
    // a server that can hold about a dozen commands' pipes: the rest must be refused, not end it
    const small = spawn('/bin/sh', ['-c', `ulimit -S -n 64 && exec ${env.host.tools.launcher} serve`], { stdio: ['pipe', 'pipe', 'ignore'] });
    const seen: LauncherEvent[] = [];
    const reader = new EventReader((e) => seen.push(e.kind === 'O' ? { ...e, data: Buffer.from(e.data) } : e));
    small.stdout!.on('data', (c: Buffer) => reader.push(c));
    const write = (b: Buffer) => new Promise<void>((done) => small.stdin!.write(b, () => done()));
    const ids = Array.from({ length: 40 }, (_, i) => `cat${i}`);
    for (const id of ids) await write(encodeRequest(['X', id, '1', ...enterArgs(sb.enterSpec(['/bin/cat']))]));
    // each is started (P) or refused (its stderr says why, then D 125 and Z)
    await eventually(() => ids.every((id) => seen.some((e) => (e.kind === 'P' || e.kind === 'Z') && e.id === id)));
    const refused = ids.filter((id) => seen.some((e) => e.kind === 'Z' && e.id === id));
    expect(refused.length).toBeGreaterThan(0);
    expect(refused.length).toBeLessThan(ids.length);
    const why = seen.find((e) => e.kind === 'O' && e.id === refused[0] && e.stream === 2);
    expect(why?.kind === 'O' && why.data.toString()).toMatch(/request refused: cannot start the command: Too many open files/);
    expect(seen.find((e) => e.kind === 'D' && e.id === refused[0])).toMatchObject({ code: 125 });
    // the started ones run on, take their input and end; then there is room again
    const started = ids.filter((id) => !refused.includes(id));
    for (const id of started) {
      await write(encodeInput(id, Buffer.from(`to ${id}\n`)));
      await write(encodeRequest(['C', id]));
    }
    await eventually(() => started.every((id) => seen.some((e) => e.kind === 'Z' && e.id === id)));
    for (const id of started) {
      const out = seen.flatMap((e) => (e.kind === 'O' && e.id === id && e.stream === 1 ? [e.data.toString()] : [])).join('');
      expect(out).toBe(`to ${id}\n`);
    }
    await write(encodeRequest(['X', 'after', '0', ...enterArgs(sb.enterSpec(['/bin/echo', 'room again']))]));
    await eventually(() => seen.some((e) => e.kind === 'Z' && e.id === 'after'));
    const after = seen.flatMap((e) => (e.kind === 'O' && e.id === 'after' && e.stream === 1 ? [e.data.toString()] : [])).join('');
    expect(after).toBe('room again\n');
    expect(small.exitCode).toBeNull();
    small.stdin!.end();
  });
});
