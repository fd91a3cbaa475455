import { chmod, chown, mkdtemp, mkdir, symlink, utimes, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { sha256 } from '../cas/digest.js';
import { RefNameSchema } from '../cas/ref-name.js';
import { cacheKey, cacheRefName } from './key.js';
import { loadRecipe } from './load.js';
import { normalizeRecipe } from './normalize.js';

async function fixture(envYaml: string): Promise<{ dir: string; file: string }> {
  const dir = await mkdtemp(join(tmpdir(), 'key-'));
  await mkdir(join(dir, 'conf'));
  await writeFile(join(dir, 'conf', 'pip.conf'), '[global]\nindex-url = http://mirror\n');
  const file = join(dir, 'env.yaml');
  await writeFile(file, envYaml);
  return { dir, file };
}

const ENV = `kind: env
name: demo
parent: base.yaml
commands: [apt-get update, apt-get install -y python3]
env: {DEBIAN_FRONTEND: noninteractive}
files: [{src: conf/pip.conf, dest: /etc/pip.conf}]
`;
const P1 = sha256('parent-1');
const P2 = sha256('parent-2');

async function keyOf(file: string, parents = [P1]): Promise<string> {
  return cacheKey(await normalizeRecipe((await loadRecipe(file)).recipe), parents);
}

describe('cacheKey', () => {
  it('is the same for the same recipe and parents, wherever the recipe lives and whatever its name', async () => {
    const a = await fixture(ENV);
    const b = await fixture(ENV.replace('name: demo', 'name: other\n# a comment'));
    expect(await keyOf(a.file)).toBe(await keyOf(a.file));
    expect(await keyOf(a.file)).toBe(await keyOf(b.file));
  });

  it('changes with a command, an env var, a copied file content or mode, and the parents', async () => {
    const a = await fixture(ENV);
    const k = await keyOf(a.file);
    const cmd = await fixture(ENV.replace('python3]', 'python3-pytest]'));
    const env = await fixture(ENV.replace('noninteractive', 'readline'));
    expect(await keyOf(cmd.file)).not.toBe(k);
    expect(await keyOf(env.file)).not.toBe(k);
    expect(await keyOf(a.file, [P2])).not.toBe(k);
    expect(await keyOf(a.file, [P1, P2])).not.toBe(await keyOf(a.file, [P2, P1]));

    await writeFile(join(a.dir, 'conf', 'pip.conf'), '[global]\nindex-url = http://other\n');
    const k2 = await keyOf(a.file);
    expect(k2).not.toBe(k);
    await chmod(join(a.dir, 'conf', 'pip.conf'), 0o600);
    expect(await keyOf(a.file)).not.toBe(k2);
  });

  it('ignores the order of debootstrap include packages but not the suite', async () => {
    const a = await fixture('kind: base\nfrom: {type: debootstrap, include: [gpgv, ca-certificates]}\n');
    const b = await fixture('kind: base\nfrom: {type: debootstrap, include: [ca-certificates, gpgv, gpgv]}\n');
    const c = await fixture('kind: base\nfrom: {type: debootstrap, suite: trixie, include: [gpgv, ca-certificates]}\n');
    expect(await keyOf(a.file, [])).toBe(await keyOf(b.file, []));
    expect(await keyOf(a.file, [])).not.toBe(await keyOf(c.file, []));
  });

  it('keys a directory base by its tree content and owners, not by timestamps', async () => {
    const a = await fixture('kind: base\nfrom: {type: directory, path: rootfs}\n');
    await mkdir(join(a.dir, 'rootfs', 'etc'), { recursive: true });
    await writeFile(join(a.dir, 'rootfs', 'etc', 'os-release'), 'ID=test\n');
    const k = await keyOf(a.file, []);
    await utimes(join(a.dir, 'rootfs', 'etc', 'os-release'), 1, 1);
    expect(await keyOf(a.file, [])).toBe(k);
    await symlink('os-release', join(a.dir, 'rootfs', 'etc', 'link'));
    const k2 = await keyOf(a.file, []);
    expect(k2).not.toBe(k);
    await writeFile(join(a.dir, 'rootfs', 'etc', 'os-release'), 'ID=other\n');
    const k3 = await keyOf(a.file, []);
    expect(k3).not.toBe(k2);
    await chown(join(a.dir, 'rootfs', 'etc'), 1000, 1000);
    expect(await keyOf(a.file, [])).not.toBe(k3);
  });

  it('maps to a valid registry ref under _cache/<kind>/', async () => {
    const a = await fixture(ENV);
    const ref = cacheRefName('env', (await keyOf(a.file)) as `sha256:${string}`);
    expect(ref).toMatch(/^_cache\/env\/[0-9a-f]{64}$/);
    expect(RefNameSchema.safeParse(ref).success).toBe(true);
  });
});
