import { describe, expect, it } from 'vitest';
import { historySegments } from './plan-history.js';

describe('history segments (pure)', () => {
  it('on a linear history each commit adds one segment after the previous dataset commit', () => {
    // B (base) <- c1 <- x <- c2 <- y <- c3
    const graph = ['c1 B', 'x c1', 'c2 x', 'y c2', 'c3 y'];
    const s = historySegments('B', ['c3', 'B', 'c1', 'c2'], graph);
    expect(s.get('B')).toEqual([]);
    expect(s.get('c1')).toEqual([{ commit: 'c1', after: ['B'] }]);
    expect(s.get('c3')).toEqual([
      { commit: 'c1', after: ['B'] },
      { commit: 'c2', after: ['c1'] },
      { commit: 'c3', after: ['c2'] },
    ]);
  });

  it('on branches a commit holds only the segments of its own ancestors (no other line), and a merge is after both', () => {
    // B <- a1 <- a2 (main), B <- b1 (stable branch), m merges a2 and b1
    const graph = ['a1 B', 'b1 B', 'a2 a1', 'm a2 b1'];
    const s = historySegments('B', ['a1', 'a2', 'b1', 'm'], graph);
    expect(s.get('b1')).toEqual([{ commit: 'b1', after: ['B'] }]);
    expect(s.get('a2')!.map((x) => x.commit)).toEqual(['a1', 'a2']);
    expect(
      s
        .get('m')!
        .find((x) => x.commit === 'm')!
        .after.sort(),
    ).toEqual(['a2', 'b1']);
    expect(
      s
        .get('m')!
        .map((x) => x.commit)
        .sort(),
    ).toEqual(['a1', 'a2', 'b1', 'm']);
  });
});
