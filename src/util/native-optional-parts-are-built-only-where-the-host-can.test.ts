import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fsmetaHelper } from '../store/fsmeta.js';
import { nativeHelper, nativeHelperWith } from './native.js';

const buildDir = join(import.meta.dirname, '..', '..', 'native', 'build');
const absent = { name: 'absent', cflags: ['-include', 'minisandbox-no-such-header.h'], libs: [], needs: 'nothing that exists' };
const markers = (): string[] => readdirSync(buildDir).filter((f) => f.startsWith('fsmeta-absent-') && f.endsWith('.failed'));
// a remembered failure from an earlier run would stand in for this run's compiles
const forget = (): void => {
  for (const f of markers()) rmSync(join(buildDir, f));
};
beforeAll(forget);
afterAll(forget);

describe('native helpers with optional parts', () => {
  it('a part whose headers this host lacks is left out, and the plain helper is used', async () => {
    const r = await nativeHelperWith('fsmeta', absent);
    expect(r).toEqual({ path: await nativeHelper('fsmeta'), has: false });
  });

  it('the failed build is remembered, so starting the next helper does not run the compiler again', async () => {
    // a compiler that logs each run and fails, first on PATH
    const bin = mkdtempSync(join(tmpdir(), 'ms-fake-cc-'));
    const log = join(bin, 'runs');
    writeFileSync(join(bin, 'cc'), `#!/bin/sh\necho run >> ${log}\nexit 1\n`, { mode: 0o755 });
    const feature = { ...absent, name: 'absent', cflags: ['-DMINISANDBOX_FAKE_CC_PROBE'] };
    await nativeHelper('fsmeta'); // the plain helper it falls back to, built with the real compiler
    const path = process.env.PATH;
    process.env.PATH = `${bin}:${path ?? ''}`;
    try {
      expect((await nativeHelperWith('fsmeta', feature)).has).toBe(false);
      expect(readFileSync(log, 'utf8')).toBe('run\n');
      expect((await nativeHelperWith('fsmeta', feature)).has).toBe(false);
      expect(readFileSync(log, 'utf8')).toBe('run\n');
    } finally {
      process.env.PATH = path;
      rmSync(bin, { recursive: true, force: true });
    }
  });

  it("the lay-out helper's frame decoding is built where libzstd and libcrypto are installed (bin/setup installs them)", async () => {
    const r = await fsmetaHelper();
    expect(r.has).toBe(true);
    expect(r.path).toMatch(/fsmeta-frames-[0-9a-f]{12}$/);
  });
});
