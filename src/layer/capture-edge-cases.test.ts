import { createHash } from 'node:crypto';
import { readFileSync, writeFileSync, mkdirSync } from 'node:fs';
import { createServer } from 'node:net';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sha256 } from '../cas/digest.js';
import { parkedHashWorkers, prestartHashWorkers } from './capture-hash.js';
import { fastEntryLine } from './capture-line.js';
import { captureAndRead, sh, tempDir, type Captured } from '../../test/helpers/capture-util.js';
import { entryLine } from './manifest.js';
import { comparePaths } from './path.js';

describe('capture of a tree with every kind of entry', () => {
  const t = tempDir('edge');
  const root = join(t.dir, 'tree');
  let c: Captured;

  beforeAll(async () => {
    mkdirSync(root);
    sh(
      `
      cd ${root}
      printf hello > small
      printf hello > same-content
      : > empty
      truncate -s 64M sparse && printf end >> sparse
      head -c 1048576 /dev/urandom > mib; head -c 1048577 /dev/urandom > mib-plus; head -c 1048575 /dev/urandom > mib-minus
      mkdir -p dir/sub && printf x > dir/sub/leaf
      ln -s /etc/passwd abs-link
      ln -s ../nowhere/at/all dangling
      ln -s dir dir-link
      printf linked > hl-b && ln hl-b hl-a && ln hl-b dir/hl-c
      mkfifo fifo
      mknod chardev c 1 3
      mknod blockdev b 7 200
      mkdir sticky && chmod 1777 sticky
      printf s > setuid && chmod 4755 setuid
      printf g > setgid && chmod 2710 setgid
      printf o > owned && chown 1234:5678 owned
      printf x > xattr-file && setfattr -n user.note -v "hi there" xattr-file && setfattr -n user.empty xattr-file
      # cap_net_raw+ep as the kernel stores it (VFS_CAP_REVISION_2), set without needing setcap
      printf cap > capfile && setfattr -n security.capability -v 0x0100000200200000000000000000000000000000 capfile
      touch -h -d '2001-02-03 04:05:06.123456789 UTC' small
      printf a > a; printf b > a-c; mkdir a.d; printf c > a.d/x
      `,
    );
    // names that are not valid UTF-8, and one with a backslash and a newline
    writeFileSync(Buffer.concat([Buffer.from(`${root}/`), Buffer.from([0x66, 0xff, 0xfe, 0x2e, 0x62, 0x69, 0x6e])]), 'bin');
    writeFileSync(`${root}/back\\slash\nnewline`, 'odd');
    setfattrBytes(Buffer.concat([Buffer.from(`${root}/`), Buffer.from([0x66, 0xff, 0xfe, 0x2e, 0x62, 0x69, 0x6e])]));
    const server = createServer();
    await new Promise<void>((r) => server.listen(join(root, 'sock'), r));
    try {
      c = await captureAndRead(root, join(t.dir, 'm.jsonl'));
    } finally {
      server.close();
    }
  });
  afterAll(() => t.cleanup());

  it('writes entries in canonical byte-wise order that the validating reader accepts', () => {
    const paths = c.list.map((e) => e.path);
    expect([...paths].sort(comparePaths)).toEqual(paths);
    // `a` < `a-c` < `a.d` < `a.d/x`: a dir's contents come where byte-wise order puts them
    expect(paths.indexOf('a-c')).toBeLessThan(paths.indexOf('a.d'));
    expect(paths.indexOf('a.d')).toBeLessThan(paths.indexOf('a.d/x'));
    expect(paths.indexOf('dir')).toBeLessThan(paths.indexOf('dir-link'));
    expect(paths.indexOf('dir-link')).toBeLessThan(paths.indexOf('dir/hl-c'));
    expect(c.entries).toBe(c.list.length);
  });

  it('digest is the sha256 of the manifest bytes, and every line is canonical', () => {
    const bytes = readFileSync(c.manifestPath);
    expect(sha256(bytes)).toBe(c.digest);
    for (const e of c.list) expect(fastEntryLine(e)).toBe(entryLine(e));
  });

  it('records regular, empty and sparse files with their content digests', () => {
    const small = c.byPath.get('small');
    expect(small).toMatchObject({ type: 'file', size: 5, digest: sha256('hello'), mtime: '981173106123456789' });
    expect(c.byPath.get('empty')).toMatchObject({ type: 'file', size: 0, digest: sha256('') });
    const sparse = Buffer.alloc(64 * 1024 * 1024 + 3);
    sparse.write('end', 64 * 1024 * 1024);
    expect(c.byPath.get('sparse')).toMatchObject({ type: 'file', size: sparse.length, digest: sha256(sparse) });
    // around the 1 MiB read buffer: one-shot hashing below it, streamed at and above it
    for (const n of ['mib', 'mib-plus', 'mib-minus']) {
      const data = readFileSync(join(root, n));
      expect(c.byPath.get(n)).toMatchObject({ size: data.length, digest: sha256(data) });
    }
  });

  it('reports each distinct content once, with a readable source path', () => {
    const digests = c.objectsSeen.map((o) => o.digest);
    expect(new Set(digests).size).toBe(digests.length);
    expect(c.objects).toBe(digests.length);
    const hello = c.objectsSeen.filter((o) => o.digest === sha256('hello'));
    expect(hello).toHaveLength(1);
    expect(readFileSync(hello[0]!.path, 'utf8')).toBe('hello');
    const files = c.list.filter((e) => e.type === 'file');
    expect(c.files).toBe(files.length);
    expect(c.size).toBe(files.reduce((s, e) => s + (e.type === 'file' ? e.size : 0), 0));
  });

  it('records symlinks without following them: absolute, dangling, to a dir', () => {
    expect(c.byPath.get('abs-link')).toMatchObject({ type: 'symlink', target: '/etc/passwd' });
    expect(c.byPath.get('dangling')).toMatchObject({ type: 'symlink', target: '../nowhere/at/all' });
    expect(c.byPath.get('dir-link')).toMatchObject({ type: 'symlink', target: 'dir' });
    expect(c.list.some((e) => e.path.startsWith('dir-link/'))).toBe(false);
  });

  it('groups hardlinks: the byte-wise first name is the file, the others link to it', () => {
    // 'dir/hl-c' sorts before 'hl-a' and 'hl-b' ('d' < 'h'): it is the group's file
    expect(c.byPath.get('dir/hl-c')).toMatchObject({ type: 'file', digest: sha256('linked') });
    expect(c.byPath.get('hl-a')).toEqual({ type: 'hardlink', path: 'hl-a', target: 'dir/hl-c' });
    expect(c.byPath.get('hl-b')).toEqual({ type: 'hardlink', path: 'hl-b', target: 'dir/hl-c' });
  });

  it('records FIFOs and devices, and skips sockets with a warning', () => {
    expect(c.byPath.get('fifo')).toMatchObject({ type: 'fifo' });
    expect(c.byPath.get('chardev')).toMatchObject({ type: 'char', major: 1, minor: 3 });
    expect(c.byPath.get('blockdev')).toMatchObject({ type: 'block', major: 7, minor: 200 });
    expect(c.byPath.has('sock')).toBe(false);
    expect(c.warnings.join('\n')).toContain('sock');
  });

  it('records setuid, setgid and sticky bits, and owners', () => {
    expect(c.byPath.get('sticky')).toMatchObject({ type: 'dir', mode: 0o1777 });
    expect(c.byPath.get('setuid')).toMatchObject({ mode: 0o4755 });
    expect(c.byPath.get('setgid')).toMatchObject({ mode: 0o2710 });
    expect(c.byPath.get('owned')).toMatchObject({ uid: 1234, gid: 5678 });
  });

  it('records user.* xattrs (also empty values) and security.capability', () => {
    expect(c.byPath.get('xattr-file')).toMatchObject({ xattrs: { 'user.note': Buffer.from('hi there').toString('base64'), 'user.empty': '' } });
    const cap = c.byPath.get('capfile') as { xattrs?: Record<string, string> };
    const hex = /=0x([0-9a-f]+)/.exec(sh(`getfattr -n security.capability -e hex ${root}/capfile`))![1]!;
    expect(cap.xattrs?.['security.capability']).toBe(Buffer.from(hex, 'hex').toString('base64'));
    expect(cap.xattrs?.['security.capability']).toBe(Buffer.from('0100000200200000000000000000000000000000', 'hex').toString('base64'));
    expect(c.byPath.get('small')).not.toHaveProperty('xattrs');
  });

  it('encodes names that are not valid UTF-8, keeping their xattrs', () => {
    expect(c.byPath.get('f\\xff\\xfe.bin')).toMatchObject({ type: 'file', digest: sha256('bin'), xattrs: { 'user.k': Buffer.from('v').toString('base64') } });
    expect(c.byPath.get('back\\x5cslash\nnewline')).toMatchObject({ type: 'file', digest: sha256('odd') });
    // the pack writer must be able to open it again: raw bytes, not a lossy string
    const obj = c.objectsSeen.find((o) => o.digest === sha256('bin'))!;
    expect(Buffer.isBuffer(obj.path)).toBe(true);
    expect(readFileSync(obj.path, 'utf8')).toBe('bin');
  });
});

function setfattrBytes(path: Buffer): void {
  // setfattr takes a path argument, which execFileSync cannot pass as raw bytes: go through a glob
  const dir = path.subarray(0, path.lastIndexOf(0x2f)).toString();
  sh(`cd ${dir} && for f in f*.bin; do setfattr -n user.k -v v -- "$f"; done`);
}

describe('capture determinism', () => {
  const t = tempDir('det');
  afterAll(() => t.cleanup());

  it('gives the same digest twice, and after cp -a, whatever the worker count', async () => {
    const root = join(t.dir, 'a');
    for (let i = 1; i <= 300; i++) {
      mkdirSync(join(root, `d${i % 7}`, `e${i % 3}`), { recursive: true });
      writeFileSync(join(root, `d${i % 7}`, `e${i % 3}`, `f${i}`), String(i).padStart(i * 13, '0'));
    }
    sh(
      `cd ${root}
       ln d1/e1/f1 d2/hard; ln -s d1 s; setfattr -n user.x -v 1 d3; mkfifo p; head -c 3145729 /dev/urandom > big`,
    );
    const a = await captureAndRead(root, join(t.dir, 'm1'), { hashWorkers: 2, hashInlineFiles: 0 });
    const b = await captureAndRead(root, join(t.dir, 'm2'), { hashWorkers: 0 });
    sh(`cp -a ${root} ${t.dir}/copy`);
    const c = await captureAndRead(join(t.dir, 'copy'), join(t.dir, 'm3'));
    expect(b.digest).toBe(a.digest);
    expect(c.digest).toBe(a.digest);
    expect(a.list.length).toBeGreaterThan(300);
    const hash = (p: string): string => createHash('sha256').update(readFileSync(p)).digest('hex');
    expect(hash(join(t.dir, 'm3'))).toBe(hash(join(t.dir, 'm1')));
    // workers started ahead are taken by the next capture from its first file, same digest
    prestartHashWorkers(2);
    expect(parkedHashWorkers()).toBe(2);
    const d = await captureAndRead(root, join(t.dir, 'm4'));
    expect(parkedHashWorkers()).toBe(0);
    expect(d.digest).toBe(a.digest);
    // a tree reached through a /proc/<pid>/root link is walked as given, not resolved
    const e = await captureAndRead(`/proc/self/root${root}`, join(t.dir, 'm5'), { keepRootPath: true });
    expect(e.digest).toBe(a.digest);
    await expect(captureAndRead('relative/tree', join(t.dir, 'm6'), { keepRootPath: true })).rejects.toThrow(/must be an absolute path/);
  });
});
