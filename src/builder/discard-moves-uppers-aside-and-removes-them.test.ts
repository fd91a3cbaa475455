/**
 * Discarding a build sandbox's upper dir: one rename takes it out of the sandbox, then it is
 * deleted in the background, in this process (`wait`) or by a detached one (`detach`), including
 * files owned by subordinate ids as a build sandbox writes them.
 */
import { chownSync, existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { eventually } from '../../test/helpers/eventually.js';
import { Discarder } from './discard.js';

const work = mkdtempSync(join(tmpdir(), 'ms-discard-'));
afterAll(() => rmSync(work, { recursive: true, force: true }));
const idMap = { uidStart: 100000, gidStart: 100000, count: 65536 };
const isRoot = process.getuid?.() === 0;

/** An upper dir like a build leaves: nested dirs and files, owned by the sandbox's root where we can. */
function makeUpper(name: string): string {
  const upper = join(work, name, 'sandbox', 'upper');
  for (let d = 0; d < 5; d++) {
    const dir = join(upper, 'u', `d${d}`, 'sub');
    mkdirSync(dir, { recursive: true });
    for (let f = 0; f < 20; f++) writeFileSync(join(dir, `f${f}`), `file ${d}/${f}\n`);
    if (isRoot) chownSync(dir, idMap.uidStart, idMap.gidStart);
  }
  mkdirSync(join(upper, 'w'));
  return upper;
}

/** True once `cond` holds (no deadline: the test's timeout is the safety net; see eventually). */
async function until(cond: () => boolean): Promise<boolean> {
  await eventually(cond, 50);
  return true;
}

describe('Discarder', () => {
  it('wait: moves the upper out of its sandbox in one rename, and settle() sees it deleted', async () => {
    const tmp = join(work, 'wait', 'tmp');
    const d = new Discarder(tmp, 'wait');
    const upper = makeUpper('wait');
    const trash = await d.moveAside(upper);
    expect(trash).not.toBeNull();
    expect(existsSync(upper)).toBe(false);
    expect(readdirSync(join(trash!, 'upper', 'u')).sort()).toEqual(['d0', 'd1', 'd2', 'd3', 'd4']);
    d.remove(trash!, idMap);
    await d.settle();
    expect(readdirSync(tmp)).toEqual([]);
  });

  it('detach: a process of its own deletes the trash, without this one waiting', async () => {
    const tmp = join(work, 'detach', 'tmp');
    const d = new Discarder(tmp, 'detach');
    const trash = await d.moveAside(makeUpper('detach'));
    expect(trash).not.toBeNull();
    d.remove(trash!, idMap);
    await d.settle(); // nothing in-process to wait for
    expect(await until(() => readdirSync(tmp).length === 0)).toBe(true);
  });

  it('a dir that cannot be moved is left where it is (the sandbox teardown deletes it) and no trash stays', async () => {
    const tmp = join(work, 'missing', 'tmp');
    const d = new Discarder(tmp, 'wait');
    expect(await d.moveAside(join(work, 'missing', 'no-such-upper'))).toBeNull();
    expect(readdirSync(tmp)).toEqual([]);
  });
});
