/**
 * A busybox environment published to a registry of the test file's own, and a store to open it
 * from: registers the hooks (push in beforeAll, removal in afterAll). The work dir is 0755 because
 * the sandboxes' subordinate ids must reach the store below it.
 */
import { chmodSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll } from 'vitest';
import type { RuntimeConfig } from '../../src/layer/env.js';
import { pushTree } from '../../src/publish/push.js';
import { populateBusyboxRoot } from '../../src/recipe/base-rootfs.js';
import { LocalRegistry } from '../../src/registry/local.js';
import { StorePaths } from '../../src/store/paths.js';

export function publishedBusybox(prefix: string, tag: string, config: Partial<RuntimeConfig> = {}): { work: string; reg: LocalRegistry; store: StorePaths } {
  const work = mkdtempSync(join(tmpdir(), prefix));
  chmodSync(work, 0o755);
  const reg = new LocalRegistry(join(work, 'registry'));
  const store = new StorePaths(join(work, 'store'));
  beforeAll(async () => {
    const root = join(work, 'rootfs');
    await populateBusyboxRoot('/bin/busybox', root);
    await pushTree(reg, new StorePaths(join(work, 'push')), root, { tag, config });
  });
  afterAll(() => rmSync(work, { recursive: true, force: true }));
  return { work, reg, store };
}
