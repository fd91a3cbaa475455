/** Trees for round-trip tests: hand-made edge cases and seeded random trees. */
import { execFileSync } from 'node:child_process';
import { closeSync, linkSync, mkdirSync, openSync, symlinkSync, writeFileSync, writeSync, chmodSync, chownSync } from 'node:fs';
import { join } from 'node:path';
import { rng } from './rng.js';

export { rng };

function sh(cmd: string, args: string[]): void {
  execFileSync(cmd, args, { stdio: 'inherit' });
}

/** Sets an exact nanosecond mtime without following symlinks (GNU touch understands @sec.nsec). */
export function setMtime(path: string, sec: number, nsec: number): void {
  sh('touch', ['-h', '-d', `@${sec}.${String(nsec).padStart(9, '0')}`, path]);
}

export function makeEdgeCaseTree(root: string): void {
  mkdirSync(root, { recursive: true });
  writeFileSync(join(root, 'empty'), '');
  writeFileSync(join(root, 'small.txt'), 'hello\n');
  writeFileSync(join(root, 'dup-a.txt'), 'same content\n');
  writeFileSync(join(root, 'dup-b.txt'), 'same content\n');
  chmodSync(join(root, 'dup-b.txt'), 0o600);
  // sparse: 8 MiB hole, 4 KiB of data, another hole
  const fd = openSync(join(root, 'sparse.img'), 'w');
  writeSync(fd, Buffer.alloc(4096, 7), 0, 4096, 8 << 20);
  closeSync(fd);
  sh('truncate', ['-s', String(16 << 20), join(root, 'sparse.img')]);
  writeFileSync(join(root, 'binary.bin'), Buffer.from(Array.from({ length: 300_000 }, (_, i) => (i * 7919) % 251)));
  writeFileSync(join(root, 'setuid-bin'), '#!/bin/sh\n');
  chmodSync(join(root, 'setuid-bin'), 0o4755);
  mkdirSync(join(root, 'sticky'));
  chmodSync(join(root, 'sticky'), 0o1777);
  mkdirSync(join(root, 'setgid-dir'));
  chmodSync(join(root, 'setgid-dir'), 0o2775);
  mkdirSync(join(root, 'private'));
  writeFileSync(join(root, 'private', 'secret'), 'x');
  chmodSync(join(root, 'private', 'secret'), 0o400);
  chmodSync(join(root, 'private'), 0o700);
  chownSync(join(root, 'private', 'secret'), 1234, 5678);
  symlinkSync('small.txt', join(root, 'rel-link'));
  symlinkSync('/etc/passwd', join(root, 'abs-link'));
  symlinkSync('does/not/exist', join(root, 'dangling'));
  symlinkSync('../../..', join(root, 'up-link'));
  writeFileSync(join(root, 'hl-1'), 'linked\n');
  linkSync(join(root, 'hl-1'), join(root, 'hl-2'));
  mkdirSync(join(root, 'sub'));
  linkSync(join(root, 'hl-1'), join(root, 'sub', 'hl-3'));
  sh('mkfifo', [join(root, 'fifo')]);
  sh('mknod', [join(root, 'null-dev'), 'c', '1', '3']);
  writeFileSync(Buffer.from(`${root}/latin1-\xe9\xff.txt`, 'latin1'), 'not utf-8 name');
  writeFileSync(join(root, 'back\\slash'), 'backslash in name');
  writeFileSync(join(root, 'xattr-file'), 'has xattrs');
  sh('setfattr', ['-n', 'user.comment', '-v', 'hello world', join(root, 'xattr-file')]);
  writeFileSync(join(root, 'cap-bin'), 'pretend binary');
  // cap_net_bind_service+ep, the v2 on-disk format
  sh('setfattr', ['-n', 'security.capability', '-v', '0x0100000200040000000000000000000000000000', join(root, 'cap-bin')]);
  let deep = join(root, 'deep');
  for (let i = 0; i < 120; i++) deep = join(deep, `d${i % 10}`);
  mkdirSync(deep, { recursive: true });
  writeFileSync(join(deep, 'bottom'), 'deep');
  setMtime(join(root, 'small.txt'), 1_600_000_000, 123_456_789);
  setMtime(join(root, 'rel-link'), 1_500_000_000, 987_654_321);
  setMtime(join(root, 'sub'), 1_400_000_000, 1);
}

export function makeRandomTree(root: string, seed: number, files = 300): void {
  const r = rng(seed);
  const pick = <T>(xs: T[]): T => xs[Math.floor(r() * xs.length)]!;
  mkdirSync(root, { recursive: true });
  const dirs = [root];
  const regular: string[] = [];
  const contents = ['', 'a', 'shared content\n', 'x'.repeat(5000)];
  for (let i = 0; i < files; i++) {
    const roll = r();
    const parent = pick(dirs);
    const name = `n${i}-${Math.floor(r() * 1e6).toString(36)}`;
    const p = join(parent, name);
    if (roll < 0.15) {
      mkdirSync(p, { mode: pick([0o755, 0o700, 0o775, 0o1777]) });
      dirs.push(p);
    } else if (roll < 0.25) {
      symlinkSync(pick(['../x', '/abs/target', name, 'a/b/c']), p);
    } else if (roll < 0.3 && regular.length > 0) {
      linkSync(pick(regular), p);
    } else {
      const size = r() < 0.9 ? Math.floor(r() * 4000) : Math.floor(r() * 400_000);
      const data = r() < 0.3 ? pick(contents) : Buffer.from(Array.from({ length: size }, (_, k) => (k * (i + 1) + seed) & 0xff));
      writeFileSync(p, data, { mode: pick([0o644, 0o600, 0o755, 0o444]) });
      if (r() < 0.2) chownSync(p, Math.floor(r() * 3000), Math.floor(r() * 3000));
      regular.push(p);
    }
    if (r() < 0.5) setMtime(p, 1_000_000_000 + Math.floor(r() * 1e9), Math.floor(r() * 1e9));
  }
}
