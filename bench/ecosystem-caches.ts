/**
 * Ecosystem caches shared across instances by content addressing: instances of one JavaScript
 * repository at two commits, each running `npm ci` in its own instance layer (so no layer is
 * shared: the second commit's lockfile adds a dependency, and npm's cache ~/.npm and
 * node_modules differ), against what a layer-sharing store (Docker/OCI) would keep for the same
 * instances: each instance's own layers (checkout, then the install's writes) as `tar | zstd -3`.
 *
 *   stored     registry bytes an instance added (measured around its build)   vs   its layers'
 *              bytes (uncompressed) and its layers as `tar | zstd -3`;
 *   second     the same for the second instance, whose node_modules and npm cache mostly hold
 *              the first one's files;
 *   time       build time of the second instance against the first (both run `npm ci` from the
 *              npm registry through this host's network, so both pay the downloads).
 *
 * Base: the test suite's shared Debian rootfs (as a tarball); env: Debian's nodejs and npm from
 * the npm registry (integrity-checked), as recipes/multilang's toolchain layer. Needs the network
 * to Debian's mirror and the npm registry (host npm writes the lockfiles, the build sandbox runs
 * `npm ci`). Scale: BENCH_INSTANCES (default 3) commits, each adding one dependency.
 *
 *   npx tsx bench/ecosystem-caches.ts
 */
import { execFileSync } from 'node:child_process';
import { chmodSync, cpSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { debianTarball } from '../test/helpers/debian-tarball.js';
import { LocalRegistry } from '../src/registry/local.js';
import { StorePaths } from '../src/store/paths.js';
import { pullEnv } from '../src/store/pull.js';

execFileSync('npm', ['run', '--silent', 'build:cli'], { stdio: 'inherit' });

const N = Number(process.env.BENCH_INSTANCES ?? 3);
/** The repository's dependencies at each commit: commit i has the first 2 + i of them. */
const DEPS: [string, string][] = [
  ['mocha', '10.8.2'],
  ['chai', '4.5.0'],
  ['sinon', '17.0.1'],
  ['lodash', '4.17.21'],
  ['yargs', '17.7.2'],
  ['semver', '7.6.3'],
];
const cli = resolve('bin/minisandbox');
const work = mkdtempSync(join(tmpdir(), 'ms-bench-eco-'));
chmodSync(work, 0o755);
const registry = join(work, 'registry');
const store = join(work, 'store');
const env = { ...process.env, MINISANDBOX_REGISTRY: registry, MINISANDBOX_STORE: store };
const GIT_ENV = { ...process.env, GIT_CONFIG_GLOBAL: '/dev/null', GIT_CONFIG_NOSYSTEM: '1' };

const sh = (cmd: string, ...args: string[]): string => execFileSync('sh', ['-c', cmd, 'sh', ...args], { encoding: 'utf8', maxBuffer: 64 << 20 }).trim();
const duBytes = (...dirs: string[]): number => Number(sh('du -scb --apparent-size "$@" | tail -1 | cut -f1', ...dirs));
const zstdBytes = (...dirs: string[]): number => Number(sh('for d in "$@"; do tar -C "$d" --numeric-owner -cf - .; done | zstd -3 -q -c | wc -c', ...dirs));
const mib = (n: number): string => `${(n / 2 ** 20).toFixed(1)} MiB`;
const pct = (a: number, b: number): string => `${((a / b) * 100).toFixed(1)}%`;

// the repository: one commit per instance, each adding a dependency (lockfile by host npm)
const repo = join(work, 'repos/bench/jsapp');
mkdirSync(repo, { recursive: true });
const git = (...args: string[]): string => execFileSync('git', ['-C', repo, ...args], { encoding: 'utf8', env: GIT_ENV }).trim();
git('init', '-q', '-b', 'main');
writeFileSync(join(repo, '.gitignore'), 'node_modules/\n');
writeFileSync(join(repo, 'test.js'), "const assert = require('assert');\nit('adds', () => assert.strictEqual(1 + 1, 2));\n");
const commits: string[] = [];
for (let i = 0; i < N; i++) {
  const deps = Object.fromEntries(DEPS.slice(0, 2 + i));
  writeFileSync(join(repo, 'package.json'), `${JSON.stringify({ name: 'jsapp', version: `1.${i}.0`, private: true, devDependencies: deps }, null, 2)}\n`);
  execFileSync('npm', ['install', '--package-lock-only', '--no-audit', '--no-fund', '--ignore-scripts'], { cwd: repo, stdio: 'ignore' });
  git('add', '-A');
  git('-c', 'user.name=b', '-c', 'user.email=b@e', 'commit', '-qm', `deps: ${Object.keys(deps).join(', ')}`);
  commits.push(git('rev-parse', 'HEAD'));
}

// specs: Debian, node from apt, npm from the npm registry; npm ci per instance
const recipes = join(work, 'recipes');
mkdirSync(recipes);
writeFileSync(join(recipes, 'base.yaml'), `kind: base\nname: debian-bookworm-minbase\nfrom:\n  type: tarball\n  path: ${await debianTarball()}\n`);
cpSync(resolve('recipes/multilang/env-toolchains.yaml'), join(recipes, 'env-toolchains.yaml'));
// only node of the toolchains (the rest is the e2e test's)
sh(
  'sed -i "s/gcc make libc6-dev patch tcl golang-go cargo nodejs/nodejs/; s/gcc --version.*&& node --version/node --version/" "$1"',
  join(recipes, 'env-toolchains.yaml'),
);
writeFileSync(
  join(recipes, 'specs.yaml'),
  [
    'base: base.yaml',
    'defaults: {workdir: /testbed}',
    'repos:',
    '  bench/jsapp:',
    '    "*": {env: env-toolchains.yaml, install: [npm ci --no-audit --no-fund], testCmd: npx mocha -R tap test.js, logParser: tap}',
    '',
  ].join('\n'),
);
writeFileSync(
  join(recipes, 'dataset.jsonl'),
  commits.map((c, i) => `${JSON.stringify({ instance_id: `bench__jsapp-${i + 1}`, repo: 'bench/jsapp', base_commit: c, version: `${i + 1}` })}\n`).join(''),
);

const reg = new LocalRegistry(registry);
const paths = new StorePaths(store);
const rows: string[][] = [];
let prevLayers = new Set<string>();
let stored = 0;
let alone = 0;
let times: number[] = [];
for (let i = 0; i < N; i++) {
  const id = `bench__jsapp-${i + 1}`;
  const before = i === 0 ? 0 : duBytes(registry);
  const t0 = performance.now();
  const args = [join(recipes, 'dataset.jsonl'), '--specs', join(recipes, 'specs.yaml'), '--repos', join(work, 'repos'), '--dataset', 'eco'];
  execFileSync(cli, ['build', '--progress', 'none', ...args, '--instances', id], { env, stdio: ['ignore', 'ignore', 'inherit'] });
  const seconds = (performance.now() - t0) / 1000;
  const pulled = await pullEnv(reg, paths, `eco/${id}`, { idShift: 0 });
  // the instance's own layers: the checkout and the install's writes (base and env are shared by all)
  const own = pulled.layerDirs.slice(-2);
  if (i === 0) {
    // the first build also made base and env, so its registry growth is not its own: it sets
    // the scale, the sharing is measured from the second instance on
    prevLayers = new Set(pulled.layerDirs);
    rows.push([id, mib(duBytes(...own)), mib(zstdBytes(...own)), '(with base and env)', `${seconds.toFixed(0)} s`]);
    times.push(seconds);
    continue;
  }
  const added = duBytes(registry) - before;
  const z = zstdBytes(...own);
  stored += added;
  alone += z;
  times.push(seconds);
  if (own.some((d) => prevLayers.has(d))) throw new Error(`${id} shares a layer with an earlier instance: no content-addressing to measure`);
  rows.push([id, mib(duBytes(...own)), mib(z), `${mib(added)} = ${pct(added, z)} of its zstd layers`, `${seconds.toFixed(0)} s`]);
}
times = times.slice(1);

console.log('\nnpm installs of one repository at different commits, one instance layer each:\n');
console.log(['instance', 'layers (bytes)', 'layers tar|zstd -3', 'registry bytes it added', 'build'].join(' | '));
for (const r of rows) console.log(r.join(' | '));
console.log(
  `\ninstances 2..${N}: registry added ${mib(stored)} vs ${mib(alone)} as one zstd layer pair each: ratio ${(stored / alone).toFixed(3)} ` +
    `(${(alone / stored).toFixed(1)}x less); build time after the first: mean ${(times.reduce((a, b) => a + b, 0) / times.length).toFixed(0)} s`,
);
rmSync(work, { recursive: true, force: true });
