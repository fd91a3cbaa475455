import { execFile } from 'node:child_process';
import { mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, describe, expect, it } from 'vitest';
import { makeRandomTree } from '../../test/helpers/trees.js';
import { LocalRegistry } from '../registry/local.js';
import { StorePaths } from './paths.js';
import { verifyRegistry, verifyStore } from './verify.js';

const run = promisify(execFile);
const cli = resolve('bin/minisandbox');
const work = mkdtempSync(join(tmpdir(), 'ms-race-'));
afterAll(() => rmSync(work, { recursive: true, force: true }));

function ms(args: string[], env: Record<string, string>): Promise<{ stdout: string }> {
  return run(cli, args, { env: { ...process.env, ...env }, maxBuffer: 64 << 20 });
}

describe('racing processes never corrupt the registry or the store', () => {
  it('four pushes of overlapping trees at once all succeed and the registry verifies', async () => {
    const registry = join(work, 'registry');
    // Two pairs of identical trees (cp -a keeps mtimes), with contents shared between all four.
    makeRandomTree(join(work, 'src-1'), 1, 150);
    makeRandomTree(join(work, 'src-3'), 2, 150);
    await run('cp', ['-a', join(work, 'src-1'), join(work, 'src-2')]);
    await run('cp', ['-a', join(work, 'src-3'), join(work, 'src-4')]);
    const trees = [1, 2, 3, 4].map((i) => join(work, `src-${i}`));
    const results = await Promise.all(
      trees.map((t, i) =>
        ms(['--json', 'import', t, '--tag', `race/t${i}`], { MINISANDBOX_REGISTRY: registry, MINISANDBOX_STORE: join(work, `push-store-${i}`) }),
      ),
    );
    // Which packs a layer lists depends on who won the race; the layer itself must not.
    const layers = results.map((r) => (JSON.parse(r.stdout) as { layer: { digest: string } }).layer.digest);
    expect(layers[0]).toBe(layers[1]);
    expect(layers[2]).toBe(layers[3]);
    expect(layers[0]).not.toBe(layers[2]);
    const reg = new LocalRegistry(registry);
    const report = await verifyRegistry(reg, work);
    expect(report.problems).toEqual([]);
    expect(report.refs).toBe(4);
  });

  it('four pulls of the same environment into one store at once all succeed with one copy on disk', async () => {
    const registry = join(work, 'registry');
    const store = join(work, 'shared-store');
    const outs = await Promise.all([0, 1, 2, 3].map(() => ms(['--json', 'pull', 'race/t0'], { MINISANDBOX_REGISTRY: registry, MINISANDBOX_STORE: store })));
    const dirs = outs.map((o) => (JSON.parse(o.stdout) as { results: { layers: string[] }[] }).results[0]!.layers);
    for (const d of dirs) expect(d).toEqual(dirs[0]);
    const layers = readdirSync(join(store, 'layers')).filter((n) => !n.endsWith('.lock'));
    expect(layers).toHaveLength(1);
    expect((await verifyStore(new StorePaths(store))).problems).toEqual([]);
  });
});
