import { describe, expect, it } from 'vitest';
import { createOutputCap } from './output-cap.js';

describe('bounded output capture', () => {
  it('keeps everything under the cap, untouched', () => {
    const cap = createOutputCap(1000);
    cap.push(Buffer.from('a\n'));
    cap.push(Buffer.from('b\n'));
    expect(cap.finish()).toEqual({ text: 'a\nb\n', truncated: false, totalBytes: 4 });
  });

  it('over the cap keeps whole lines of the head and the tail and says how much went', () => {
    const cap = createOutputCap(4096);
    cap.push(Buffer.from('FIRST LINE\n'));
    for (let i = 0; i < 10_000; i++) cap.push(Buffer.from(`noise ${i}\n`));
    cap.push(Buffer.from('LAST LINE\n'));
    const out = cap.finish();
    expect(out.truncated).toBe(true);
    expect(out.text.startsWith('FIRST LINE\n')).toBe(true);
    expect(out.text.endsWith('LAST LINE\n')).toBe(true);
    expect(Buffer.byteLength(out.text)).toBeLessThanOrEqual(4096 + 64);
    const m = /\[minisandbox: (\d+) bytes of output elided\]\n/.exec(out.text);
    expect(m).not.toBeNull();
    expect(Buffer.byteLength(out.text) - m![0].length + Number(m![1])).toBe(out.totalBytes);
    for (const line of out.text.split('\n').filter((l) => l.startsWith('noise'))) expect(line).toMatch(/^noise \d+$/);
  });
});
