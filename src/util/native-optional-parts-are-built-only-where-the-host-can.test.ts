import { describe, expect, it } from 'vitest';
import { fsmetaHelper } from '../store/fsmeta.js';
import { nativeHelper, nativeHelperWith } from './native.js';

describe('native helpers with optional parts', () => {
  it('a part whose headers this host lacks is left out, and the plain helper is used', async () => {
    const r = await nativeHelperWith('fsmeta', { name: 'absent', cflags: ['-include', 'minisandbox-no-such-header.h'], libs: [] });
    expect(r).toEqual({ path: await nativeHelper('fsmeta'), has: false });
  });

  it("the lay-out helper's frame decoding is built where libzstd and libcrypto are installed (bin/setup installs them)", async () => {
    const r = await fsmetaHelper();
    expect(r.has).toBe(true);
    expect(r.path).toMatch(/fsmeta-frames-[0-9a-f]{12}$/);
  });
});
