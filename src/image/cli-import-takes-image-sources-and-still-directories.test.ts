import { execFile } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, describe, expect, it } from 'vitest';
import { makeTar, writeLayout } from '../../test/helpers/oci-layout.js';

const work = mkdtempSync(join(tmpdir(), 'ms-cli-import-'));
afterAll(() => rmSync(work, { recursive: true, force: true }));
const cli = resolve('bin/minisandbox');

async function ms(...args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  return promisify(execFile)(cli, ['--json', '--registry', join(work, 'registry'), '--store', join(work, 'store'), ...args]).then(
    (x) => ({ code: 0, stdout: x.stdout, stderr: x.stderr }),
    (e: { code: number; stdout: string; stderr: string }) => ({ code: e.code, stdout: e.stdout, stderr: e.stderr }),
  );
}

describe('minisandbox import', () => {
  it('imports an image source, says when it was imported before, and still captures a directory', async () => {
    const t = await makeTar([{ name: 'hello', data: 'hi\n' }]);
    writeLayout(join(work, 'layout'), [{ tag: 'v1', layers: [{ blob: t, tar: t }], config: { Env: ['A=1'], WorkingDir: '/w' } }]);
    const first = await ms('import', `oci:${join(work, 'layout')}:v1`, '--tag', 'x/one');
    expect(first.code).toBe(0);
    expect(JSON.parse(first.stdout)).toMatchObject({ ref: 'x/one', status: 'imported' });
    const again = await ms('import', `oci:${join(work, 'layout')}:v1`, '--tag', 'x/two');
    expect(JSON.parse(again.stdout)).toMatchObject({ ref: 'x/two', status: 'present', fetchedBytes: 0 });
    mkdirSync(join(work, 'tree'));
    writeFileSync(join(work, 'tree', 'f'), 'x');
    expect((await ms('import', join(work, 'tree'), '--tag', 'x/dir')).code).toBe(0);
  }, 60_000);

  it('exits 3 for a missing archive or tag and 2 for a bad option, saying what to do', async () => {
    const missing = await ms('import', `oci-archive:${join(work, 'nope.tar')}`, '--tag', 'x/y');
    expect(missing.code).toBe(3);
    expect(missing.stderr).toMatch(/nope\.tar/);
    expect((await ms('import', `oci:${join(work, 'layout')}:v9`, '--tag', 'x/y')).code).toBe(3);
    const bad = await ms('import', `docker://127.0.0.1:1/a/b:c`, '--tag', 'x/y', '--tls-verify', 'maybe');
    expect(bad.code).toBe(2);
  }, 60_000);
});
