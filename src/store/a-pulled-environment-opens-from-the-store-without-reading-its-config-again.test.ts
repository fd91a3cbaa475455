import { chmodSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { makeRandomTree } from '../../test/helpers/trees.js';
import { digestHex } from '../cas/digest.js';
import { pushTree } from '../publish/push.js';
import { LocalRegistry } from '../registry/local.js';
import { StorePaths } from './paths.js';
import { pullEnv } from './pull.js';

const work = mkdtempSync(join(tmpdir(), 'ms-pulled-env-'));
chmodSync(work, 0o755);
afterAll(() => rmSync(work, { recursive: true, force: true }));

describe('a pulled environment opens from the store', () => {
  it('reads its config from the store: a registry whose copy went bad still opens it there, and a fresh store refuses it', async () => {
    const reg = new LocalRegistry(join(work, 'registry'));
    makeRandomTree(join(work, 'tree'), 7, 20);
    const pushed = await pushTree(reg, new StorePaths(join(work, 'push')), join(work, 'tree'), { tag: 'p/env' });
    const store = new StorePaths(join(work, 'store'));
    const first = await pullEnv(reg, store, 'p/env');
    expect(first.digest).toBe(pushed.env);

    // the registry's config blob is corrupted after the pull
    writeFileSync(join(work, 'registry', 'blobs', 'sha256', digestHex(pushed.env)), '{"not":"the config"}');
    const again = await pullEnv(reg, store, 'p/env');
    expect(again.env).toEqual(first.env);
    expect(again.layerDirs).toEqual(first.layerDirs);
    expect(again.fetchedObjects).toBe(0);

    // the ref still goes through the registry: a store that lacks the env verifies it and refuses
    await expect(pullEnv(reg, new StorePaths(join(work, 'fresh')), 'p/env')).rejects.toMatchObject({ code: 'DIGEST_MISMATCH' });
  });
});
