/**
 * An attacker's snapshot: inside the sandbox a ring of processes that continue each other
 * (SIGCONT) keeps a flipper running through a SIGSTOP sweep, and the flipper swaps directories of
 * the upper for absolute symlinks to a host directory holding a secret file (of the size of the
 * sandbox's own file, so no size check catches it) with a secret extended attribute, while
 * snapshots are taken again and again. No snapshot may hold the secret: not its manifest, not its
 * packs, not a sandbox made from it, nor a fork's copy. And the hold must hold the ring: every snapshot succeeds
 * (the old sweep failed after 30 s with a 500 when a member never stopped) and the flipper's
 * directories are whole in each (each decoy once: as it was at one moment).
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { eventually } from '../../test/helpers/eventually.js';
import { ServerKit } from '../../test/helpers/server-kit.js';
import { blobsUnder, decoysCommand, swapRingScript } from '../../test/helpers/symlink-swap-ring.js';
import { randomHex } from '../util/lazy-crypto.js';

const kit = new ServerKit();
beforeAll(() => kit.setUp(), 120_000);
afterAll(() => kit.tearDown());

const DIRS = 8;
const ROUNDS = 8;
const SECRET = `HOST-SECRET-${randomHex(16)}`;
const hostDir = mkdtempSync(join(tmpdir(), 'msb-host-secret-'));
afterAll(() => rmSync(hostDir, { recursive: true, force: true }));

describe('a snapshot of a sandbox that swaps its dirs for symlinks to the host', () => {
  it('never holds a host file or its attributes, and holds the ring still for every capture', async () => {
    writeFileSync(join(hostDir, 's'), SECRET);
    execFileSync('setfattr', ['-n', 'user.msbsecret', '-v', SECRET, join(hostDir, 's')]);
    const id = await kit.create();
    const ses = (await kit.call('POST', `/v1/sandboxes/${id}/sessions`, {})).json().session as string;
    const started = await kit.call('POST', `/v1/sandboxes/${id}/sessions/${ses}/run`, { command: swapRingScript(hostDir, SECRET.length, DIRS) });
    expect(started.json(), started.text).toMatchObject({ exit_code: 0 });
    await eventually(async () => (await kit.sh(id, 'wc -l < /root/ring/pids')).trim() === '8');
    const made: string[] = [];
    try {
      const statuses: number[] = [];
      for (let round = 0; round < ROUNDS; round++) {
        const s = await kit.call('POST', `/v1/sandboxes/${id}/snapshot`, {});
        statuses.push(s.status);
        if (s.status !== 201) continue;
        const fromSnapshot = await kit.create({ snapshot: s.json().snapshot as string });
        made.push(fromSnapshot);
        // a fork copies the upper with the same hold (and tar, which follows no link)
        const f = await kit.call('POST', `/v1/sandboxes/${id}/fork`, { count: 1 });
        expect(f.status, f.text).toBe(200);
        const forked = (f.json().children as Array<{ id: string }>)[0]!.id;
        made.push(forked);
        for (const child of [fromSnapshot, forked]) {
          // what it sees: the sandbox's own dirs and decoys, whole
          // (a moment's state: d$i the dir, or d$i a link, or gone, with the dir as x$i meanwhile)
          const seen = await kit.sh(child, decoysCommand(DIRS));
          expect(seen).not.toContain(SECRET);
          const decoys = seen.split('\n').filter((l) => l !== '');
          expect(decoys).toHaveLength(DIRS);
          for (const d of decoys) expect(d).toMatch(new RegExp(`^\\d{${SECRET.length}}$`));
        }
      }
      // nothing of the host's file anywhere in the snapshots' registry or the store's layers
      for (const b of [...blobsUnder(join(kit.store.root, 'snapshots')), ...blobsUnder(kit.store.layersDir)]) {
        expect(b.includes(SECRET)).toBe(false);
        expect(b.includes(Buffer.from(SECRET).toString('base64'))).toBe(false);
      }
      expect(statuses).toEqual(Array.from({ length: ROUNDS }, () => 201));
    } finally {
      for (const c of [id, ...made]) await kit.call('DELETE', `/v1/sandboxes/${c}`);
    }
    expect(statSync(join(hostDir, 's')).size).toBe(SECRET.length);
  }, 300_000);
});
