/**
 * node:crypto on first use, and random names without it. Loading node:crypto costs about 8 ms of
 * CPU, a sizeable part of a one-shot `minisandbox run` (issue 16's start-up aim), and a run on a
 * pulled environment hashes nothing: the modules on that path import this instead of node:crypto.
 */
import { closeSync, openSync, readSync } from 'node:fs';
import { createRequire } from 'node:module';

type NodeCrypto = typeof import('node:crypto');

let loaded: NodeCrypto | undefined;

export function nodeCrypto(): NodeCrypto {
  loaded ??= createRequire(import.meta.url)('node:crypto') as NodeCrypto;
  return loaded;
}

/**
 * `n` random bytes from the kernel (getrandom's pool through /dev/urandom, which never blocks once
 * the system has booted): for unique temporary names, ids and slot choices.
 */
export function randomBuffer(n: number): Buffer {
  const buf = Buffer.alloc(n);
  const fd = openSync('/dev/urandom', 'r');
  try {
    for (let off = 0; off < n; ) off += readSync(fd, buf, off, n - off, null);
  } finally {
    closeSync(fd);
  }
  return buf;
}

export function randomHex(bytes: number): string {
  return randomBuffer(bytes).toString('hex');
}

/** A uniform integer in [0, max) for 0 < max <= 2^32 (rejection sampling: no modulo bias). */
export function randomBelow(max: number): number {
  const limit = 2 ** 32 - (2 ** 32 % max);
  for (;;) {
    const v = randomBuffer(4).readUInt32LE(0);
    if (v < limit) return v % max;
  }
}
