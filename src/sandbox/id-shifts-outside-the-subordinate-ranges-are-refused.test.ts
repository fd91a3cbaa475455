/**
 * `pull --id-shift N` gives layer files owners N + their ids: N must be 0 or the start of ids
 * inside the subordinate ranges, or a layer gets owners no sandbox maps (`-3` made uid 4294967293).
 */
import { execFile } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, describe, expect, it } from 'vitest';
import { checkIdShift } from '../host/subid.js';

const work = mkdtempSync(join(tmpdir(), 'msb-idshift-'));
afterAll(() => rmSync(work, { recursive: true, force: true }));
const subuidFile = join(work, 'subuid');
const subgidFile = join(work, 'subgid');
writeFileSync(subuidFile, 'alice:100000:65536\nroot:1000000:1000000000\n');
writeFileSync(subgidFile, 'alice:100000:65536\nroot:1000000:1000000000\n');
const files = { subuidFile, subgidFile };

describe('checkIdShift', () => {
  it.each(['0', '100000', '1000000', '1065536', String(1_000_000 + 1_000_000_000 - 65536)])('takes %s', async (s) => {
    expect(await checkIdShift(s, files)).toBe(Number(s));
  });

  it.each([
    ['a negative shift', '-3'],
    ['a shift below every range', '5'],
    ['a range running past its end', '100001'],
    ['a range past every range', String(1_000_000 + 1_000_000_000)],
    ['a fraction', '100000.5'],
    ['hex', '0x186a0'],
    ['nothing', ''],
  ])('refuses %s as invalid input', async (_what, s) => {
    await expect(checkIdShift(s, files)).rejects.toMatchObject({ code: 'INVALID_INPUT' });
  });

  it('refuses a shift inside a uid range but no gid range', async () => {
    writeFileSync(join(work, 'subgid-other'), 'alice:200000:65536\n');
    await expect(checkIdShift('100000', { subuidFile, subgidFile: join(work, 'subgid-other') })).rejects.toMatchObject({ code: 'INVALID_INPUT' });
  });
});

describe('pull --id-shift', () => {
  it('exits 2 for -3, before anything is laid out', async () => {
    const cli = resolve(import.meta.dirname, '..', '..', 'bin/minisandbox');
    const r = await promisify(execFile)(cli, ['--registry', join(work, 'reg'), '--store', join(work, 'store'), 'pull', 'any/ref', '--id-shift', '-3']).then(
      () => ({ code: 0, stderr: '' }),
      (e: { code?: number; stderr?: string }) => ({ code: e.code, stderr: e.stderr ?? '' }),
    );
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/--id-shift.*'-3'/);
    expect(existsSync(join(work, 'store'))).toBe(false);
  }, 60_000);

  it('exits 2 for a shift outside /etc/subuid and /etc/subgid, before anything is laid out', async () => {
    const cli = resolve(import.meta.dirname, '..', '..', 'bin/minisandbox');
    const r = await promisify(execFile)(cli, ['--registry', join(work, 'reg'), '--store', join(work, 'store2'), 'pull', 'any/ref', '--id-shift', '12345']).then(
      () => ({ code: 0, stderr: '' }),
      (e: { code?: number; stderr?: string }) => ({ code: e.code, stderr: e.stderr ?? '' }),
    );
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/--id-shift/);
    expect(existsSync(join(work, 'store2'))).toBe(false);
  }, 60_000);
});
