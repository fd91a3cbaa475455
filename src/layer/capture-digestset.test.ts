import { createHash } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { DigestSet } from './capture-digestset.js';

const key = (i: number): Buffer => createHash('sha256').update(String(i)).digest();

describe('DigestSet', () => {
  it('remembers every key across many growths and reports duplicates', () => {
    const s = new DigestSet(16);
    for (let i = 0; i < 20_000; i++) expect(s.add(key(i))).toBe(true);
    expect(s.size).toBe(20_000);
    for (let i = 0; i < 20_000; i += 7) expect(s.add(key(i))).toBe(false);
    for (let i = 0; i < 20_000; i += 13) expect(s.has(key(i))).toBe(true);
    for (let i = 20_000; i < 20_500; i++) expect(s.has(key(i))).toBe(false);
    expect(s.size).toBe(20_000);
  });

  it('keeps keys that collide in their first bytes apart', () => {
    const s = new DigestSet(16);
    const a = Buffer.alloc(32, 1);
    const b = Buffer.from(a);
    b[31] = 2;
    expect(s.add(a)).toBe(true);
    expect(s.add(b)).toBe(true);
    expect(s.has(a) && s.has(b)).toBe(true);
    expect(s.add(Buffer.from(b))).toBe(false);
  });
});
