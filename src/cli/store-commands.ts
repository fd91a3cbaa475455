/** Commands over the layer store and registry: import, export, pull, ls, inspect, verify, gc, audit. */
import { execFile } from 'node:child_process';
import { mkdir, rm, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { randomBytes } from 'node:crypto';
import type { Command } from 'commander';
import { audit } from '../audit/audit.js';
import { InvalidInputError, MinisandboxError } from '../errors.js';
import { gcRegistry } from '../registry/gc.js';
import { exportEnv } from '../store/export.js';
import { gcStore } from '../store/gc.js';
import { pullEnv } from '../store/pull.js';
import { pushTree, resolveEnv } from '../store/push.js';
import { verifyRegistry, verifyStore } from '../store/verify.js';
import { type GlobalOptions, makeContext, parseDuration, parseEnvPairs } from './context.js';
import { EXIT, formatBytes, table } from './output.js';

type Globals = () => GlobalOptions;

async function extractTarball(file: string, dest: string): Promise<void> {
  await mkdir(dest, { recursive: true });
  // GNU tar detects gzip/xz/zstd itself; owners, modes and xattrs are kept as recorded.
  await promisify(execFile)('tar', ['-x', '-f', file, '-C', dest, '--numeric-owner', '-p', '--xattrs', '--xattrs-include=*', '--acls'], { maxBuffer: 16 << 20 }).catch((e: unknown) => {
    throw new InvalidInputError(`cannot extract ${file}: ${(e as { stderr?: string }).stderr?.trim() ?? String(e)}`);
  });
}

export function registerStoreCommands(program: Command, globals: Globals, setExit: (code: number) => void): void {
  program
    .command('import')
    .description('capture a directory tree or rootfs tarball as a layer, push it and tag the environment')
    .argument('<source>', 'directory or tarball (.tar, .tar.gz, .tar.zst, ...)')
    .requiredOption('--tag <ref>', 'ref to tag the new environment with, e.g. base/bookworm')
    .option('--parent <ref>', 'environment to stack the layer on')
    .option('--overlay-upper', 'the source is an overlayfs upper dir: record whiteouts and opaque dirs')
    .option('--workdir <dir>', 'runtime working directory')
    .option('--env <K=V...>', 'runtime environment variables')
    .action(async (source: string, o: { tag: string; parent?: string; overlayUpper?: boolean; workdir?: string; env?: string[] }) => {
      const ctx = makeContext(globals());
      const st = await stat(source).catch(() => null);
      if (st === null) throw new InvalidInputError(`import source ${source} does not exist`);
      let dir = source;
      let scratch: string | null = null;
      if (!st.isDirectory()) {
        scratch = join(ctx.store.tmpDir, `import-${randomBytes(6).toString('hex')}`);
        ctx.out.progress({ phase: 'extract', message: `extracting ${source}` });
        await extractTarball(source, scratch);
        dir = scratch;
      }
      try {
        const parent = o.parent !== undefined ? await resolveEnv(ctx.registry, o.parent) : null;
        const config: Record<string, unknown> = {};
        if (o.workdir !== undefined) config.workdir = o.workdir;
        if (o.env !== undefined) config.env = { ...(parent?.config.config.env ?? {}), ...parseEnvPairs(o.env) };
        const r = await pushTree(ctx.registry, ctx.store, dir, {
          parent,
          tag: o.tag,
          config,
          overlayUpper: o.overlayUpper === true,
          onProgress: (p) => ctx.out.progress({ ...p, message: `import: ${p.phase}` }),
        });
        ctx.out.result({ ref: o.tag, ...r }, () =>
          [
            `${o.tag} -> ${r.env}`,
            `layer ${r.layer.digest}: ${r.layer.entries} entries, ${formatBytes(r.layer.size)}`,
            `objects: ${r.newObjects} new (${formatBytes(r.newBytes)} packed in ${r.packs} pack(s)), ${r.reusedObjects} already in the registry`,
          ].join('\n'),
        );
      } finally {
        if (scratch !== null) await rm(scratch, { recursive: true, force: true });
      }
    });

  program
    .command('export')
    .description("write an environment's merged tree to a directory (pulling as needed)")
    .argument('<ref>')
    .argument('<dir>')
    .action(async (ref: string, dir: string) => {
      const ctx = makeContext(globals());
      const r = await exportEnv(ctx.registry, ctx.store, ref, dir, { onProgress: (p) => ctx.out.progress({ ...p, message: `export: ${p.phase} ${p.layer.slice(7, 19)}` }) });
      ctx.out.result({ ref, dir, ...r }, () => `exported ${ref} to ${dir}: ${r.entries} entries`);
    });

  program
    .command('pull')
    .description("bring environments into this node's store")
    .argument('[refs...]')
    .option('--id-shift <n>', 'lay layers out with owners shifted by this host id base', '0')
    .action(async (refs: string[], o: { idShift: string }) => {
      const ctx = makeContext(globals());
      if (refs.length === 0) throw new MinisandboxError('USAGE', 'pull needs at least one ref', { hint: 'minisandbox pull REF...' });
      const results: { ref: string; env: string; layers: string[]; fetchedObjects: number; fetchedBytes: number; seconds: number }[] = [];
      for (const ref of refs) {
        const t0 = performance.now();
        const r = await pullEnv(ctx.registry, ctx.store, ref, {
          idShift: Number(o.idShift),
          onProgress: (p) => ctx.out.progress({ ref, ...p, message: `pull ${ref}: ${p.phase} layer ${p.layer.slice(7, 19)}` }),
        });
        results.push({ ref, env: r.digest, layers: r.layerDirs, fetchedObjects: r.fetchedObjects, fetchedBytes: r.fetchedBytes, seconds: (performance.now() - t0) / 1000 });
      }
      ctx.out.result(results, () => results.map((r) => `${r.ref} -> ${r.env}: ${r.layers.length} layer(s), fetched ${r.fetchedObjects} objects (${formatBytes(r.fetchedBytes)}) in ${r.seconds.toFixed(2)}s`).join('\n'));
    });

  program
    .command('ls')
    .description('list refs with their environments')
    .action(async () => {
      const ctx = makeContext(globals());
      const rows: { ref: string; env: string; layers: number; size: number; objects: number }[] = [];
      for await (const r of ctx.registry.listRefs()) {
        const { config } = await resolveEnv(ctx.registry, r.digest);
        rows.push({ ref: r.name, env: r.digest, layers: config.layers.length, size: config.layers.reduce((s, l) => s + l.size, 0), objects: config.layers.reduce((s, l) => s + l.objects, 0) });
      }
      ctx.out.result(rows, () => (rows.length === 0 ? `no refs in ${ctx.registry.url}` : table([['REF', 'ENV', 'LAYERS', 'SIZE', 'OBJECTS'], ...rows.map((r) => [r.ref, r.env.slice(0, 19), String(r.layers), formatBytes(r.size), String(r.objects)])])));
    });

  program
    .command('inspect')
    .description("an environment's layers, sizes, object counts and runtime config")
    .argument('<ref>')
    .action(async (ref: string) => {
      const ctx = makeContext(globals());
      const { digest, config } = await resolveEnv(ctx.registry, ref);
      ctx.out.result({ ref, env: digest, ...config }, () =>
        [
          `${ref} -> ${digest}`,
          table([['LAYER', 'ENTRIES', 'OBJECTS', 'SIZE', 'PACKS'], ...config.layers.map((l) => [l.digest, String(l.entries), String(l.objects), formatBytes(l.size), String(l.packs.length)])]),
          `config: ${JSON.stringify(config.config)}`,
        ].join('\n'),
      );
    });

  program
    .command('verify')
    .description('recompute every digest in the registry and the store; exit 1 if anything is wrong')
    .option('--no-store', 'check the registry only')
    .action(async (o: { store: boolean }) => {
      const ctx = makeContext(globals());
      await mkdir(ctx.store.tmpDir, { recursive: true });
      const reg = await verifyRegistry(ctx.registry, ctx.store.tmpDir, (what) => ctx.out.progress({ message: `verify ${what}` }));
      const st = o.store ? await verifyStore(ctx.store, (what) => ctx.out.progress({ message: `verify ${what}` })) : { storeFiles: 0, problems: [] };
      const problems = [...reg.problems, ...st.problems];
      ctx.out.result({ ...reg, storeFiles: st.storeFiles, problems, ok: problems.length === 0 }, () =>
        [
          `registry ${ctx.registry.url}: ${reg.blobs} blobs, ${reg.packs} packs, ${reg.objects} objects, ${reg.refs} refs`,
          o.store ? `store ${ctx.store.root}: ${st.storeFiles} files` : '',
          problems.length === 0 ? 'ok' : `${problems.length} problem(s):\n${problems.map((p) => `  ${p.kind} ${p.subject}: ${p.detail}`).join('\n')}`,
        ].filter((s) => s !== '').join('\n'),
      );
      if (problems.length > 0) setExit(EXIT.failed);
    });

  program
    .command('gc')
    .description('remove from store and registry what no ref (and no live sandbox) reaches')
    .option('--dry-run', 'say what would be removed')
    .option('--grace <duration>', 'keep anything younger than this', '1h')
    .option('--store-only', 'leave the registry alone')
    .option('--registry-only', 'leave the store alone')
    .action(async (o: { dryRun?: boolean; grace: string; storeOnly?: boolean; registryOnly?: boolean }) => {
      const ctx = makeContext(globals());
      const graceMs = parseDuration(o.grace);
      const dryRun = o.dryRun === true;
      const store = o.registryOnly ? null : await gcStore(ctx.store, { graceMs, dryRun });
      const registry = o.storeOnly ? null : await gcRegistry(ctx.registry, { graceMs, dryRun });
      ctx.out.result({ dryRun, store, registry }, () =>
        [
          dryRun ? '(dry run: nothing removed)' : '',
          store ? `store: ${store.removedLayers.length} layers, ${store.removedLinks} pooled files, ${store.removedObjects} staged objects, ${store.removedTmp} leftovers; ${formatBytes(store.freedBytes)}` : '',
          registry ? `registry: ${registry.removedBlobs.length} blobs (${formatBytes(registry.freedBytes)}), ${registry.removedPacks.length} catalog entries; ${registry.keptBlobs} blobs kept` : '',
          ...(dryRun && registry ? registry.removedBlobs.map((b) => `  would remove ${b.digest} (${formatBytes(b.size)})`) : []),
          ...(dryRun && store ? store.removedLayers.map((l) => `  would remove layer ${l}`) : []),
        ].filter((s) => s !== '').join('\n'),
      );
    });

  program
    .command('audit')
    .description('storage used against one container image per ref')
    .action(async () => {
      const ctx = makeContext(globals());
      const r = await audit(ctx.registry);
      const t = r.totals;
      const pct = (x: number): string => `${(x * 100).toFixed(2)}%`;
      ctx.out.result(r, () =>
        [
          table([['REF', 'LAYERS', 'FILES', 'IMAGE BYTES'], ...r.refs.map((x) => [x.ref, String(x.layers), String(x.files), formatBytes(x.logicalBytes)])]),
          '',
          `one image per ref (logical):    ${formatBytes(t.logicalBytes)}`,
          `shared identical layers only:   ${formatBytes(t.dockerStyleBytes)}`,
          `unique file contents:           ${formatBytes(t.uniqueContentBytes)} (${t.distinctObjects} objects)`,
          `registry on disk (compressed):  ${formatBytes(t.registryBytes)}`,
          `registry / images: ${pct(t.registryToLogical)}   registry / layer-shared store: ${pct(t.registryToDockerStyle)}`,
        ].join('\n'),
      );
    });
}
