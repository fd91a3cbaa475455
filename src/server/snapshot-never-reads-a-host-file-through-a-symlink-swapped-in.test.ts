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
import { mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { eventually } from '../../test/helpers/eventually.js';
import { ServerKit } from '../../test/helpers/server-kit.js';
import { randomHex } from '../util/lazy-crypto.js';

const kit = new ServerKit();
beforeAll(() => kit.setUp(), 120_000);
afterAll(() => kit.tearDown());

const DIRS = 8;
const ROUNDS = 8;
const SECRET = `HOST-SECRET-${randomHex(16)}`;
const hostDir = mkdtempSync(join(tmpdir(), 'msb-host-secret-'));
afterAll(() => rmSync(hostDir, { recursive: true, force: true }));

/**
 * Eight ring members; member 0 writes a new decoy `s` (as large as the host's secret, a new
 * object each time) into each of /root/w/d0..d7, then turns them all into symlinks to the host
 * dir (the dirs kept as x0..x7) and back; the others only continue every member, forever.
 */
function ringScript(): string {
  // `j`: each member's own `i` says which member it is
  const all = (body: string): string => `for j in ${Array.from({ length: DIRS }, (_, i) => i).join(' ')}; do ${body}; done`;
  const flip = [
    'n=$((n+1))',
    all(`printf '%0${SECRET.length}d' $n > /root/w/d$j/s`),
    all(`mv /root/w/d$j /root/w/x$j; ln -s ${hostDir} /root/w/d$j`),
    all('rm /root/w/d$j; mv /root/w/x$j /root/w/d$j'),
  ].join('; ');
  return [
    `R=/root/ring; mkdir -p $R /root/w; ${all(`mkdir /root/w/d$j; printf '%0${SECRET.length}d' 0 > /root/w/d$j/s`)}`,
    'for i in 0 1 2 3 4 5 6 7; do',
    `  ( n=0; while [ ! -f $R/go ]; do :; done; P=$(cat $R/pids); ` +
      `while :; do kill -CONT $P 2>/dev/null; if [ $i = 0 ]; then ${flip}; fi; done ) </dev/null >/dev/null 2>&1 &`,
    '  echo $! >> $R/pids',
    'done',
    'touch $R/go',
  ].join('\n');
}

/** Every file below `dir`, zstd-decompressed where it is zstd, as one buffer each. */
function blobsUnder(dir: string): Buffer[] {
  const out: Buffer[] = [];
  for (const e of readdirSync(dir, { recursive: true, withFileTypes: true })) {
    if (!e.isFile()) continue;
    const p = join(e.parentPath, e.name);
    out.push(readFileSync(p));
    try {
      out.push(execFileSync('zstd', ['-dcq', p], { maxBuffer: 256 << 20, stdio: ['ignore', 'pipe', 'ignore'] }));
    } catch {
      // not zstd
    }
  }
  return out;
}

describe('a snapshot of a sandbox that swaps its dirs for symlinks to the host', () => {
  it('never holds a host file or its attributes, and holds the ring still for every capture', async () => {
    writeFileSync(join(hostDir, 's'), SECRET);
    execFileSync('setfattr', ['-n', 'user.msbsecret', '-v', SECRET, join(hostDir, 's')]);
    const id = await kit.create();
    const ses = (await kit.call('POST', `/v1/sandboxes/${id}/sessions`, {})).json().session as string;
    const started = await kit.call('POST', `/v1/sandboxes/${id}/sessions/${ses}/run`, { command: ringScript() });
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
          const seen = await kit.sh(child, `for i in $(seq 0 ${DIRS - 1}); do cat /root/w/d$i/s /root/w/x$i/s 2>/dev/null; echo; done`);
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
