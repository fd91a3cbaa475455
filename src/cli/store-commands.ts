/** Commands over the layer store and registry: import, export, pull, ls, inspect, verify, gc, audit. */
import { execFile } from 'node:child_process';
import { mkdir, rm, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { randomBytes } from 'node:crypto';
import type { Command } from 'commander';
import { audit, isInternalRef } from '../audit/audit.js';
import { InvalidInputError, MinisandboxError } from '../errors.js';
import { gcRegistry } from '../registry/gc.js';
import { exportEnv } from '../store/export.js';
import { gcStore } from '../store/gc.js';
import { storeOwners } from '../store/owners.js';
import { prefetch } from '../store/prefetch.js';
import { datasetNameFromFile } from '../build/plan.js';
import { loadDataset } from '../dataset/read.js';
import { selectInstances } from '../dataset/select.js';
import { addSelectionOptions, type SelectionFlags, selectionFrom } from './select-options.js';
import { copyRefs, parseCopyRefs } from '../registry/copy.js';
import { openRegistry } from '../registry/open.js';
import { hostIdShift, reapStale } from '../runtime/open.js';
import { pushTree, resolveEnv } from '../store/push.js';
import { verifyRegistry, verifyStore } from '../store/verify.js';
import { type GlobalOptions, makeContext, parseDuration, parseEnvPairs, parseSize } from './context.js';
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

  const pull = program
    .command('pull')
    .description("bring environments into this node's store: refs, or every instance of a dataset")
    .argument('[refs...]')
    .option('--dataset <file>', 'pull <name>/<instance_id> for every row of a SWE-bench JSONL/JSON file')
    .option('--dataset-name <name>', 'tag prefix for --dataset (default: from the file name)')
    .option('--jobs <n>', 'environments pulled at once', '4')
    .option('--io-budget <size>', 'compressed bytes being fetched at once, across all pulls', '512m')
    .option('--id-shift <n|auto>', 'owner shift of laid-out layers; auto: what this host\'s sandboxes use', 'auto');
  addSelectionOptions(pull).action(async (refs: string[], o: SelectionFlags & { dataset?: string; datasetName?: string; jobs: string; ioBudget: string; idShift: string }) => {
      const ctx = makeContext(globals());
      const all = [...refs];
      const selection = await selectionFrom(o);
      if (selection !== null && o.dataset === undefined) throw new MinisandboxError('USAGE', '--instances picks instances of a dataset', { hint: 'minisandbox pull --dataset FILE --instances ID[,ID...]' });
      if (o.dataset !== undefined) {
        const name = o.datasetName ?? datasetNameFromFile(o.dataset);
        for (const r of selectInstances(await loadDataset(o.dataset), selection, (x) => x.row.instance_id)) all.push(`${name}/${r.row.instance_id}`);
      }
      if (all.length === 0) throw new MinisandboxError('USAGE', 'pull needs refs or --dataset FILE', { hint: 'minisandbox pull REF... | minisandbox pull --dataset FILE' });
      const idShift = o.idShift === 'auto' ? await hostIdShift() : Number.parseInt(o.idShift, 10);
      const t0 = performance.now();
      const results = await prefetch(ctx.registry, ctx.store, all, {
        idShift,
        jobs: Math.max(1, Number.parseInt(o.jobs, 10) || 1),
        budgetBytes: parseSize(o.ioBudget),
        onResult: (r, done) => ctx.out.progress({ ...r, done, total: all.length, message: `pull ${done}/${all.length}: ${r.ref} ${r.status}` }),
      });
      const bytes = results.reduce((s, r) => s + r.fetchedBytes, 0);
      const failed = results.filter((r) => r.status === 'failed');
      const seconds = (performance.now() - t0) / 1000;
      ctx.out.result({ results, pulled: results.filter((r) => r.status === 'pulled').length, present: results.filter((r) => r.status === 'present').length, failed: failed.length, fetchedBytes: bytes, seconds }, () =>
        [
          ...results.map((r) => `${r.ref}: ${r.status}${r.status === 'failed' ? ` (${r.error})` : ` ${formatBytes(r.fetchedBytes)} in ${r.seconds.toFixed(2)}s`}`),
          `${results.length} environment(s): ${results.length - failed.length} in the store, ${failed.length} failed; fetched ${formatBytes(bytes)} in ${seconds.toFixed(1)}s`,
        ].join('\n'),
      );
      if (failed.length > 0) setExit(EXIT.failed);
    });

  program
    .command('copy')
    .description('mirror refs (and only the blobs the target lacks) between two registries, local or S3')
    .argument('[refs...]')
    .requiredOption('--from <registry>', 'source registry (directory or s3://bucket/prefix)')
    .requiredOption('--to <registry>', 'target registry')
    .option('--all', 'every ref of the source')
    .option('--jobs <n>', 'blobs copied at once', '4')
    .action(async (refs: string[], o: { from: string; to: string; all?: boolean; jobs: string }) => {
      const ctx = makeContext(globals());
      const summary = await copyRefs(openRegistry(o.from), openRegistry(o.to), parseCopyRefs(refs, o.all === true), {
        concurrency: Math.max(1, Number.parseInt(o.jobs, 10) || 1),
        tmpDir: ctx.store.tmpDir,
        onProgress: (p) => ctx.out.progress({ ...p, message: `copy ${p.refsDone}/${p.refsTotal} refs: ${p.ref} ${p.phase}; ${p.blobsCopied} blobs copied (${formatBytes(p.bytesCopied)}), ${p.blobsSkipped} present` }),
      });
      ctx.out.result(summary, () => `copied ${summary.refsWritten} ref(s): ${summary.blobsCopied} blobs (${formatBytes(summary.bytesCopied)}) copied, ${summary.blobsSkipped} already there`);
    });

  program
    .command('ls')
    .description('list refs with their environments')
    .option('--all', 'include the build cache refs (_cache/...)')
    .action(async (o: { all?: boolean }) => {
      const ctx = makeContext(globals());
      const rows: { ref: string; env: string; layers: number; size: number; objects: number }[] = [];
      for await (const r of ctx.registry.listRefs()) {
        if (!o.all && isInternalRef(r.name)) continue;
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
      const st = o.store ? await verifyStore(ctx.store, (what) => ctx.out.progress({ message: `verify ${what}` }), await storeOwners()) : { storeFiles: 0, problems: [] };
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
    .option('--grace <duration>', 'keep anything younger than this; in the registry, also how long unreached blobs stay condemned before a gc deletes them', '1h')
    .option('--store-only', 'leave the registry alone')
    .option('--registry-only', 'leave the store alone')
    .action(async (o: { dryRun?: boolean; grace: string; storeOnly?: boolean; registryOnly?: boolean }) => {
      const ctx = makeContext(globals());
      const graceMs = parseDuration(o.grace);
      const dryRun = o.dryRun === true;
      // Sandboxes left by a crashed runtime hold leases and mounts: reclaim them first.
      const reaped = o.registryOnly || dryRun ? 0 : await reapStale(ctx.store);
      const store = o.registryOnly ? null : await gcStore(ctx.store, { graceMs, dryRun, owners: await storeOwners() });
      const registry = o.storeOnly ? null : await gcRegistry(ctx.registry, { graceMs, dryRun });
      ctx.out.result({ dryRun, reapedSandboxes: reaped, store, registry }, () =>
        [
          dryRun ? '(dry run: nothing removed)' : '',
          reaped > 0 ? `reclaimed ${reaped} stale sandbox(es)` : '',
          store ? `store: ${store.removedLayers.length} layers, ${store.removedLinks} pooled files, ${store.removedObjects} staged objects, ${store.removedTmp} leftovers; ${formatBytes(store.freedBytes)}` : '',
          registry ? `registry: ${registry.removedBlobs.length} blobs (${formatBytes(registry.freedBytes)}), ${registry.removedPacks.length} catalog entries; ${registry.keptBlobs} blobs kept` : '',
          registry && registry.condemnedBlobs.length > 0
            ? `registry: ${registry.condemnedBlobs.length} unreached blobs (${formatBytes(registry.condemnedBlobs.reduce((n, b) => n + b.size, 0))}) condemned: a gc at least ${o.grace} after their condemnation removes them`
            : '',
          ...(dryRun && registry ? registry.removedBlobs.map((b) => `  would remove ${b.digest} (${formatBytes(b.size)})`) : []),
          ...(dryRun && store ? store.removedLayers.map((l) => `  would remove layer ${l}`) : []),
        ].filter((s) => s !== '').join('\n'),
      );
    });

  program
    .command('audit')
    .description('storage used against one container image per ref')
    .option('--all', 'count the build cache refs (_cache/...) as images too')
    .action(async (o: { all?: boolean }) => {
      const ctx = makeContext(globals());
      const r = await audit(ctx.registry, { includeInternal: o.all === true });
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
