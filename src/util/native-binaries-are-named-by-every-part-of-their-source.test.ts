import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { localIncludes } from './native.js';

describe('a native binary is named by its source and the parts it includes', () => {
  it('finds the parts a source includes beside it, not system headers', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'ms-native-parts-'));
    try {
      const source = join(dir, 'x.c');
      writeFileSync(source, '#include <stdio.h>\n#include "x-part.c"\n  #include "indented.c"\n#include "../elsewhere.c"\nint main(void) { return 0; }\n#include "y-part.c"\n');
      // only top-of-line includes of files beside it: what the build hashes with the source
      expect(await localIncludes(source)).toEqual(['x-part.c', 'y-part.c']);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('the lay-out helper has its manifest reader as a part', async () => {
    expect(await localIncludes(join(import.meta.dirname, '..', '..', 'native', 'fsmeta.c'))).toEqual(['fsmeta-manifest.c']);
  });
});
