import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { HostCapabilityError } from '../errors.js';
import { holderCommand, overlayLowerOption } from './commands.js';
import { parseProcCgroup } from './cgroup.js';
import { ensureSubidRange, findSubidRange, parseSubidFile, resolveIdMap } from '../host/subid.js';

describe('subordinate id ranges', () => {
  it('parses /etc/subuid, skipping junk, and never picks a range holding the user itself', () => {
    const entries = parseSubidFile('# c\nroot:1000000:65536\nbad line\nalice:100000:65536\n1001:200000:70000\nalice:5:3\n');
    expect(entries).toHaveLength(4);
    expect(findSubidRange(entries, { name: 'alice', uid: 1000 }, 65536)?.start).toBe(100000);
    expect(findSubidRange(entries, { name: 'bob', uid: 1001 }, 65536)?.start).toBe(200000);
    expect(findSubidRange(entries, { name: 'alice', uid: 100005 }, 65536)).toBeUndefined();
    expect(findSubidRange(entries, { name: 'alice', uid: 1000 }, 100000)).toBeUndefined();
  });

  it('a missing range fails with the exact line to add, and ensureSubidRange adds it once', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'msb-subid-'));
    const subuidFile = join(dir, 'subuid');
    const subgidFile = join(dir, 'subgid');
    await writeFile(subuidFile, 'other:100000:65536');
    await writeFile(subgidFile, '');
    const err = await resolveIdMap({ user: { name: 'carol', uid: 0 }, subuidFile, subgidFile }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(HostCapabilityError);
    expect((err as HostCapabilityError).hint).toContain('`carol:1000000:65536`');
    if (process.getuid?.() === 0) {
      expect(await ensureSubidRange({ user: 'carol', subuidFile, subgidFile })).toHaveLength(2);
      expect(await ensureSubidRange({ user: 'carol', subuidFile, subgidFile })).toHaveLength(0);
      expect(await readFile(subuidFile, 'utf8')).toBe('other:100000:65536\ncarol:1000000:1000000000\n');
      expect(await resolveIdMap({ user: { name: 'carol', uid: 0 }, subuidFile, subgidFile })).toEqual({ uidStart: 1000000, gidStart: 1000000, count: 65536 });
    }
    await rm(dir, { recursive: true, force: true });
  });
});

describe('command lines', () => {
  it('the holder maps only the subordinate range (never the caller, never host root)', () => {
    const argv = holderCommand({
      launcher: '/x/sandbox-launch',
      idMap: { uidStart: 1000000, gidStart: 2000000, count: 65536 },
      upperDir: '/s/x/upper',
      mergedDir: '/s/x/root',
      lowerDirs: ['/l/base', '/l/env', '/l/inst'],
      tmpfsBytes: 1024,
      volatileUpper: false,
      network: 'none',
      hostname: 'h',
      workdir: '/',
      fromTar: false,
      rlimits: { nofile: 1024, core: 0 },
      cgroupProcs: [],
    });
    const opt = (name: string): string[] => argv.flatMap((a, i) => (a === name ? [argv[i + 1]!] : []));
    expect(opt('--uid-map')).toEqual(['1000000:65536']);
    expect(opt('--gid-map')).toEqual(['2000000:65536']);
    expect(opt('--net')).toEqual(['none']);
    expect(argv).toContain('/l/inst:/l/env:/l/base');
    expect(overlayLowerOption(['a', 'b'])).toBe('b:a');
  });

  it('reads v1 and v2 lines of /proc/self/cgroup', () => {
    expect(parseProcCgroup('4:memory:/a/b\n1:cpu,cpuacct:/\n0::/user.slice\n')).toEqual([
      { hierarchy: 4, controllers: ['memory'], path: '/a/b' },
      { hierarchy: 1, controllers: ['cpu', 'cpuacct'], path: '/' },
      { hierarchy: 0, controllers: [], path: '/user.slice' },
    ]);
  });
});
