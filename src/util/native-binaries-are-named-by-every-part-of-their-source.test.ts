import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { localIncludes } from './native.js';

describe('a native binary is named by its source and the parts it includes', () => {
  it('finds the parts a source includes beside it, not system headers', () => {
    const source =
      '#include <stdio.h>\n#include "x-part.c"\n  #include "indented.c"\n#include "../elsewhere.c"\nint main(void) { return 0; }\n#include "y-part.c"\n';
    // only top-of-line includes of files beside it: what the build hashes with the source
    expect(localIncludes(source)).toEqual(['x-part.c', 'y-part.c']);
  });

  it('the lay-out helper has its manifest reader as a part', () => {
    expect(localIncludes(readFileSync(join(import.meta.dirname, '..', '..', 'native', 'fsmeta.c'), 'utf8'))).toEqual(['fsmeta-manifest.c']);
  });
});
