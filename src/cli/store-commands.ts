/**
 * Commands over the layer store and registry: import, export, pull, ls, inspect, verify, gc, audit.
 * What each command needs is imported inside its action (start-up: see main.ts).
 */
import { spawn } from 'node:child_process';
import { mkdir, open, rm, stat, writeFile } from 'node:fs/promises';
import { dirname, join, resolve } from 'node:path';
import { randomBytes } from 'node:crypto';
import { type Command, Option } from 'commander';
import { errorMessage, InvalidInputError, MinisandboxError, NotFoundError } from '../errors.js';
import { type Context, type GlobalOptions, checkDirOption, makeContext, quietAwsSdkNodeWarning, storeContext } from './context.js';
import { opt, option } from './options.js';
import { addSelectionOptions, type SelectionFlags, selectionFrom } from './select-options.js';
import { EXIT, formatBytes, formatDuration, table } from './output.js';

type Globals = () => GlobalOptions;

/** `import docker://...|oci:...|oci-archive:...|docker-archive:...`: a container image becomes an environment. */
async function importImageCommand(
  ctx: Context,
  source: string,
  o: { tag: string; parent?: string; overlayUpper?: boolean; platform: string; tlsVerify: 'true' | 'false'; authfile?: string; jobs: number },
): Promise<void> {
  if (o.parent !== undefined || o.overlayUpper === true)
    throw new InvalidInputError('--parent and --overlay-upper do not apply to images', 'an image brings its own layers');
  const { importImage } = await import('../image/import.js');
  const r = await importImage(ctx.registry, ctx.store, source, {
    tag: o.tag,
    platform: o.platform,
    tlsVerify: o.tlsVerify === 'true',
    ...(o.authfile === undefined ? {} : { authFile: o.authfile }),
    jobs: o.jobs,
    onProgress: (p) => ctx.out.progress({ ...p, message: p.message ?? `import: ${p.phase}` }),
  });
  ctx.out.result({ ref: o.tag, ...r }, () =>
    [
      `${o.tag} -> ${r.env} (${r.status === 'present' ? 'imported before, nothing fetched' : 'imported'})`,
      ...r.layers.map(
        (l) =>
          `  layer ${l.layer.slice(0, 19)} from ${l.diffId.slice(0, 19)}: ${l.converted ? 'converted' : 'converted before'}, ` +
          `image ${formatBytes(l.compressedSize)} compressed / ${formatBytes(l.size)}`,
      ),
      `fetched ${formatBytes(r.fetchedBytes)}; objects: ${r.newObjects} new, ${r.reusedObjects} already in the registry`,
    ].join('\n'),
  );
}

/**
 * GNU tar detects gzip/xz/zstd itself; owners, modes and xattrs are kept as recorded. Its error
 * output can be huge (a line per failed entry: 16 MiB for a tarball of 10,000 nested dirs), so
 * it goes to a log file and the error names its first line and the log.
 */
async function extractTarball(file: string, dest: string, logDir: string): Promise<void> {
  await mkdir(dest, { recursive: true });
  await mkdir(logDir, { recursive: true, mode: 0o700 });
  const log = join(logDir, `import-${new Date().toISOString().replace(/[:.]/g, '-')}-${process.pid}.log`);
  const fh = await open(log, 'w', 0o600);
  let status: number | null;
  try {
    status = await new Promise<number | null>((resolve, reject) => {
      const child = spawn('tar', ['-x', '-f', file, '-C', dest, '--numeric-owner', '-p', '--xattrs', '--xattrs-include=*', '--acls'], {
        stdio: ['ignore', 'ignore', fh.fd],
      });
      child.on('error', reject);
      child.on('close', (code) => resolve(code));
    });
  } finally {
    await fh.close();
  }
  if (status === 0) {
    await rm(log, { force: true });
    return;
  }
  const head = await readHead(log, 4096);
  const lines = head.split('\n').filter((l) => l.trim() !== '');
  const first = (lines.find((l) => !/^tar: (Exiting with failure|Error is not recoverable)/.test(l)) ?? lines[0] ?? `tar exited with ${String(status)}`).slice(
    0,
    300,
  );
  throw new InvalidInputError(`cannot extract ${file}: ${first}`, `tar's whole error output is in ${log}`);
}

async function readHead(path: string, bytes: number): Promise<string> {
  const fh = await open(path, 'r');
  try {
    const buf = Buffer.alloc(bytes);
    const { bytesRead } = await fh.read(buf, 0, bytes, 0);
    return buf.subarray(0, bytesRead).toString('utf8');
  } finally {
    await fh.close();
  }
}

export function registerStoreCommands(program: Command, globals: Globals, setExit: (code: number) => void): void {
  program
    .command('import')
    .description('capture a directory tree or rootfs tarball as a layer, or convert a container image, push it and tag the environment')
    .argument(
      '<source>',
      'directory, tarball (.tar, .tar.gz, .tar.zst, ...), or image: docker://HOST/REPO:TAG|@sha256:..., oci:DIR[:TAG], oci-archive:FILE, docker-archive:FILE',
    )
    .requiredOption('--tag <ref>', 'ref to tag the new environment with, e.g. base/bookworm')
    .option('--parent <ref>', 'environment to stack the layer on')
    .option('--overlay-upper', 'the source is an overlayfs upper dir: record whiteouts and opaque dirs')
    .option('--workdir <dir>', 'runtime working directory (absolute)', opt.sandboxPath())
    .option('-e, --env <K=V>', 'a runtime environment variable (repeat for more)', opt.envPair())
    .option('--platform <os/arch>', 'images: the entry of a manifest list or index to import', 'linux/amd64')
    .option('--tls-verify <bool>', 'images: false talks plain HTTP to the registry', opt.oneOf(['true', 'false']), 'true')
    .option('--authfile <file>', 'images: registry credentials (else $REGISTRY_AUTH_FILE, containers auth.json, ~/.docker/config.json)')
    .option('--jobs <n>', 'images: layers downloaded and converted at once', opt.int({ min: 1, max: 64 }), 3)
    .action(
      async (
        source: string,
        o: {
          tag: string;
          parent?: string;
          overlayUpper?: boolean;
          workdir?: string;
          env?: Record<string, string>;
          platform: string;
          tlsVerify: 'true' | 'false';
          authfile?: string;
          jobs: number;
        },
      ) => {
        const ctx = await storeContext(globals());
        const { isImageSource } = await import('../image/reference.js');
        if (isImageSource(source)) {
          await importImageCommand(ctx, source, o);
          return;
        }
        const st = await stat(source).catch(() => null);
        if (st === null) throw new NotFoundError(`import source ${source}`, 'give a directory or a tarball');
        const [{ pushTree }, { resolveEnv }] = await Promise.all([import('../publish/push.js'), import('../registry/resolve-env.js')]);
        let dir = source;
        let scratch: string | null = null;
        if (!st.isDirectory()) {
          // named by our pid and start time: the next import removes it if we are killed (store/leftovers.ts)
          const [{ removeDeadLeftovers }, { ownedName }] = await Promise.all([import('../store/leftovers.js'), import('../util/owned-name.js')]);
          await removeDeadLeftovers(ctx.store);
          scratch = join(ctx.store.tmpDir, ownedName('import-', randomBytes(6).toString('hex')));
          ctx.out.progress({ phase: 'extract', message: `extracting ${source}` });
          dir = scratch;
        }
        try {
          if (scratch !== null) await extractTarball(source, scratch, join(ctx.store.root, 'logs'));
          const parent = o.parent !== undefined ? await resolveEnv(ctx.registry, o.parent) : null;
          const config: Record<string, unknown> = {};
          if (o.workdir !== undefined) config.workdir = o.workdir;
          if (o.env !== undefined) config.env = { ...(parent?.config.config.env ?? {}), ...o.env };
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
      },
    );

  program
    .command('export')
    .description("write an environment's merged tree to a directory (pulling as needed)")
    .argument('<ref>')
    .argument('<dir>')
    .option('--preserve-special', 'keep setuid/setgid bits, file capabilities and device nodes (root only; DIR is then made 0700)')
    .action(async (ref: string, dir: string, o: { preserveSpecial?: boolean }) => {
      checkDirOption('export directory', dir);
      const ctx = await storeContext(globals());
      const { exportEnv } = await import('../store/export.js');
      const r = await exportEnv(ctx.registry, ctx.store, ref, dir, {
        preserveSpecial: o.preserveSpecial === true,
        onProgress: (p) => ctx.out.progress({ ...p, message: `export: ${p.phase} ${p.layer.slice(7, 19)}` }),
      });
      ctx.out.result({ ref, dir, ...r }, () => `exported ${ref} to ${dir}: ${r.entries} entries`);
    });

  const pull = program
    .command('pull')
    .description("bring environments into this node's store: refs, or every instance of a dataset")
    .argument('[refs...]')
    .option('--dataset <file>', 'pull <name>/<instance_id> for every row of a SWE-bench JSONL/JSON file')
    .option('--dataset-name <name>', 'tag prefix for --dataset (default: from the file name)')
    .option('--jobs <n>', 'environments pulled at once', opt.int({ min: 1, max: 256 }), 4)
    .addOption(
      option('--io-budget <size>', 'compressed bytes being fetched at once, across all pulls', opt.size({ min: 1024 ** 2 }), {
        value: 512 * 1024 ** 2,
        shown: '512m',
      }),
    )
    .option(
      '--id-shift <n|auto>',
      "owner shift of laid-out layers; auto: what this host's sandboxes use",
      opt.or('auto', opt.int({ min: 0, max: 2 ** 32 - 65536 })),
      'auto',
    );
  addSelectionOptions(pull).action(
    async (refs: string[], o: SelectionFlags & { dataset?: string; datasetName?: string; jobs: number; ioBudget: number; idShift: number | 'auto' }) => {
      // an explicit shift must stay inside this host's subordinate ranges (checked before any work)
      const explicitShift = o.idShift === 'auto' ? null : await (await import('../host/subid.js')).checkIdShift(String(o.idShift));
      const ctx = await storeContext(globals());
      const all = [...refs];
      const selection = await selectionFrom(o);
      if (selection !== null && o.dataset === undefined)
        throw new MinisandboxError('USAGE', '--instances picks instances of a dataset', { hint: 'minisandbox pull --dataset FILE --instances ID[,ID...]' });
      if (o.dataset !== undefined) {
        const [{ datasetNameFromFile }, { loadDataset }, { selectInstances }] = await Promise.all([
          import('../builder/plan.js'),
          import('../dataset/read.js'),
          import('../dataset/select.js'),
        ]);
        const name = o.datasetName ?? datasetNameFromFile(o.dataset);
        for (const r of selectInstances(await loadDataset(o.dataset), selection, (x) => x.row.instance_id)) all.push(`${name}/${r.row.instance_id}`);
      }
      if (all.length === 0)
        throw new MinisandboxError('USAGE', 'pull needs refs or --dataset FILE', { hint: 'minisandbox pull REF... | minisandbox pull --dataset FILE' });
      const [{ hostIdShift }, { prefetch }, { ProgressView }] = await Promise.all([
        import('../runtime/open.js'),
        import('../store/prefetch.js'),
        import('./progress.js'),
      ]);
      const idShift = explicitShift ?? (await hostIdShift(ctx.store));
      const t0 = performance.now();
      const view = new ProgressView(ctx.out, 'pull', { phase: 'resolve', itemsDone: 0, itemsTotal: all.length, unit: 'envs' });
      let results: Awaited<ReturnType<typeof prefetch>>;
      try {
        results = await prefetch(ctx.registry, ctx.store, all, {
          idShift,
          jobs: o.jobs,
          budgetBytes: o.ioBudget,
          onProgress: (p) =>
            view.set({
              phase: p.phase,
              subject: p.ref,
              itemsDone: p.refsDone,
              compressedDoneBytes: p.compressedDoneBytes,
              compressedTotalBytes: p.compressedTotalBytes,
              doneBytes: p.doneBytes,
              totalBytes: p.totalBytes,
              bytesVerb: 'laid out',
              fields: { ref: p.ref },
            }),
          onResult: (r, done) => {
            view.set({ itemsDone: done });
            // each ref's outcome as it comes, for scripts; people read them in the summary
            if (ctx.out.progressMode === 'json')
              ctx.out.progress({ ...r, done, total: all.length, message: `pull ${done}/${all.length}: ${r.ref} ${r.status}` });
          },
        });
      } finally {
        view.stop();
      }
      const bytes = results.reduce((s, r) => s + r.fetchedBytes, 0);
      const compressed = results.reduce((s, r) => s + r.fetchedCompressedBytes, 0);
      const failed = results.filter((r) => r.status === 'failed');
      const durationMs = Math.round(performance.now() - t0);
      const fetched = (c: number, u: number): string => `fetched ${formatBytes(c)} compressed, ${formatBytes(u)} laid out`;
      ctx.out.result(
        {
          results,
          pulled: results.filter((r) => r.status === 'pulled').length,
          present: results.filter((r) => r.status === 'present').length,
          failed: failed.length,
          fetchedBytes: bytes,
          fetchedCompressedBytes: compressed,
          durationMs,
        },
        () =>
          [
            ...results.map(
              (r) =>
                `${r.ref}: ${r.status}${
                  r.status === 'failed'
                    ? ` (${r.error})`
                    : r.status === 'present'
                      ? ` in ${(r.durationMs / 1000).toFixed(2)}s`
                      : `: ${fetched(r.fetchedCompressedBytes, r.fetchedBytes)} in ${(r.durationMs / 1000).toFixed(2)}s`
                }`,
            ),
            `${results.length} environment(s): ${results.length - failed.length} in the store, ` +
              `${failed.length} failed; ${fetched(compressed, bytes)} in ${(durationMs / 1000).toFixed(1)}s`,
          ].join('\n'),
      );
      // as `run` and `inspect` exit: 3 when what failed was only refs the registry lacks
      if (failed.length > 0) setExit(failed.every((r) => r.code === 'NOT_FOUND') ? EXIT.notFound : EXIT.failed);
    },
  );

  program
    .command('copy')
    .description('mirror refs (and only the blobs the target lacks) between two registries, local or S3')
    .argument('[refs...]')
    .requiredOption('--from <registry>', 'source registry (directory or s3://bucket/prefix)')
    .requiredOption('--to <registry>', 'target registry')
    .option('--all', 'every ref of the source')
    .option('--jobs <n>', 'blobs copied at once', opt.int({ min: 1, max: 256 }), 4)
    .action(async (refs: string[], o: { from: string; to: string; all?: boolean; jobs: number }) => {
      for (const [name, where] of [
        ['--from', o.from],
        ['--to', o.to],
      ] as const)
        if (!where.startsWith('s3://')) checkDirOption(name, where);
      // a mistyped source would copy nothing and say "copied 0 ref(s)"
      if (!o.from.startsWith('s3://') && (await stat(o.from).catch(() => null)) === null)
        throw new NotFoundError(`source registry ${o.from}`, 'give an existing registry directory, or s3://bucket/prefix');
      const ctx = await storeContext(globals());
      quietAwsSdkNodeWarning();
      const [{ copyRefs, parseCopyRefs }, { openRegistry }] = await Promise.all([import('../registry/copy.js'), import('../registry/open.js')]);
      const summary = await copyRefs(openRegistry(o.from), openRegistry(o.to), parseCopyRefs(refs, o.all === true), {
        concurrency: o.jobs,
        tmpDir: ctx.store.tmpDir,
        onProgress: (p) =>
          ctx.out.progress({
            ...p,
            message:
              `copy ${p.refsDone}/${p.refsTotal} refs: ${p.ref} ${p.phase}; ${p.blobsCopied} ` +
              `blobs copied (${formatBytes(p.bytesCopied)}), ${p.blobsSkipped} present`,
          }),
      });
      ctx.out.result(
        summary,
        () =>
          `copied ${summary.refsWritten} ref(s): ${summary.blobsCopied} blobs ` +
          `(${formatBytes(summary.bytesCopied)}) copied, ${summary.blobsSkipped} already there`,
      );
    });

  program
    .command('tag')
    .description('give an environment another tag: SRC is a tag or an environment digest (sha256:...), DST a new or moved tag')
    .argument('<src>')
    .argument('<dst>')
    .action(async (src: string, dst: string) => {
      const ctx = await makeContext(globals());
      const [{ parseRefName }, { resolveEnv }, { closureOfConfig }] = await Promise.all([
        import('../cas/ref-name.js'),
        import('../registry/resolve-env.js'),
        import('../registry/closure.js'),
      ]);
      parseRefName(dst);
      // the environment must be whole before a tag names it (a ref is written after all it reaches)
      const { digest, config } = await resolveEnv(ctx.registry, src);
      for (const b of closureOfConfig(digest, config).blobs)
        if ((await ctx.registry.statBlob(b)) === null)
          throw new NotFoundError(`blob ${b} of environment ${digest}`, 'the environment is incomplete in this registry: push or import it again');
      const before = await ctx.registry.getRef(dst);
      await ctx.registry.putRef(dst, digest);
      const moved = before !== null && before !== digest ? before : undefined;
      ctx.out.result(
        { tag: dst, env: digest, ...(moved === undefined ? {} : { previous: moved }) },
        () => `${dst} -> ${digest}${moved === undefined ? '' : ` (was ${moved})`}`,
      );
    });

  program
    .command('rm')
    .alias('untag')
    .description('remove tags (the environments stay until `gc` finds nothing else reaches them)')
    .argument('<tags...>')
    .action(async (tags: string[]) => {
      const ctx = await makeContext(globals());
      const { parseRefName } = await import('../cas/ref-name.js');
      for (const t of tags) parseRefName(t);
      // every name checked before any is removed: a typo in the third of three removes nothing
      const found = await Promise.all(tags.map(async (t) => ({ tag: t, env: await ctx.registry.getRef(t) })));
      const missing = found.filter((f) => f.env === null).map((f) => f.tag);
      if (missing.length > 0) throw new NotFoundError(`tag ${missing.join(', ')}`, 'list the tags with `minisandbox ls`; nothing was removed');
      for (const t of tags) await ctx.registry.deleteRef(t);
      ctx.out.result({ removed: found }, () =>
        [...found.map((f) => `removed ${f.tag} (${f.env})`), 'run `minisandbox gc` to free what no tag reaches any more (after its grace period)'].join('\n'),
      );
    });

  program
    .command('ls')
    .description('list refs with their environments')
    .option('--all', 'include the build cache refs (_cache/...)')
    .action(async (o: { all?: boolean }) => {
      const ctx = await makeContext(globals());
      const [{ isInternalRef }, { resolveEnv }, { refusedWhy }] = await Promise.all([
        import('../audit/audit.js'),
        import('../registry/resolve-env.js'),
        import('../store/refused.js'),
      ]);
      type Row = { ref: string; env: string; layers: number; size: number; objects: number } | { ref: string; broken: string };
      const rows: Row[] = [];
      for await (const r of ctx.registry.listRefEntries()) {
        if (!o.all && isInternalRef(r.name)) continue;
        // shown, not dropped: a ref that names nothing usable is something to repair
        if (r.digest === null) {
          rows.push({ ref: r.name, broken: r.broken });
          continue;
        }
        try {
          const { config } = await resolveEnv(ctx.registry, r.digest);
          // a layer a pull (or verify) of this store found refused: reading manifests is verify's
          const refused = config.layers.map((l) => ({ l, why: refusedWhy(ctx.store, l.digest) })).find((x) => x.why !== undefined);
          if (refused !== undefined) {
            rows.push({ ref: r.name, broken: `a pull refuses its layer ${refused.l.digest}: ${refused.why}` });
            continue;
          }
          rows.push({
            ref: r.name,
            env: r.digest,
            layers: config.layers.length,
            size: config.layers.reduce((s, l) => s + l.size, 0),
            objects: config.layers.reduce((s, l) => s + l.objects, 0),
          });
        } catch (e) {
          rows.push({ ref: r.name, broken: errorMessage(e) });
        }
      }
      const broken = rows.filter((r) => 'broken' in r).length;
      ctx.out.result(rows, () =>
        rows.length === 0
          ? `no refs in ${ctx.registry.url}`
          : [
              table([
                ['REF', 'ENV', 'LAYERS', 'SIZE', 'OBJECTS'],
                ...rows.map((r) =>
                  'broken' in r
                    ? [r.ref, `BROKEN: ${r.broken}`, '', '', '']
                    : [r.ref, r.env.slice(0, 19), String(r.layers), formatBytes(r.size), String(r.objects)],
                ),
              ]),
              broken > 0 ? `${broken} broken ref(s): \`minisandbox verify\` lists every problem; push, copy or import the ref again, or delete its file` : '',
            ]
              .filter((x) => x !== '')
              .join('\n'),
      );
    });

  program
    .command('inspect')
    .description("an environment's layers, sizes, object counts and runtime config")
    .argument('<ref>')
    .action(async (ref: string) => {
      const ctx = await makeContext(globals());
      const { resolveEnv } = await import('../registry/resolve-env.js');
      const { digest, config } = await resolveEnv(ctx.registry, ref);
      ctx.out.result({ ref, env: digest, ...config }, () =>
        [
          `${ref} -> ${digest}`,
          table([
            ['LAYER', 'ENTRIES', 'OBJECTS', 'SIZE', 'PACKS'],
            ...config.layers.map((l) => [l.digest, String(l.entries), String(l.objects), formatBytes(l.size), String(l.packs.length)]),
          ]),
          `config: ${JSON.stringify(config.config)}`,
        ].join('\n'),
      );
    });

  program
    .command('verify')
    .description('recompute every digest in the registry and the store; exit 1 if anything is wrong')
    .option('--no-store', 'check the registry only')
    .action(async (o: { store: boolean }) => {
      const ctx = await storeContext(globals());
      const [{ verifyRegistry, verifyStore }, { storeOwners }, { recordRefused }] = await Promise.all([
        import('../store/verify.js'),
        import('../store/owners.js'),
        import('../store/refused.js'),
      ]);
      await mkdir(ctx.store.tmpDir, { recursive: true });
      const reg = await verifyRegistry(
        ctx.registry,
        ctx.store.tmpDir,
        (what) => ctx.out.progress({ message: `verify ${what}` }),
        // where `ls` finds them
        (layer, why) => recordRefused(ctx.store, layer, why),
      );
      const st = o.store
        ? await verifyStore(ctx.store, (what) => ctx.out.progress({ message: `verify ${what}` }), await storeOwners())
        : { storeFiles: 0, problems: [] };
      const problems = [...reg.problems, ...st.problems];
      ctx.out.result({ ...reg, storeFiles: st.storeFiles, problems, ok: problems.length === 0 }, () =>
        [
          `registry ${ctx.registry.url}: ${reg.blobs} blobs, ${reg.packs} packs, ${reg.objects} objects, ${reg.refs} refs`,
          o.store ? `store ${ctx.store.root}: ${st.storeFiles} files` : '',
          problems.length === 0 ? 'ok' : `${problems.length} problem(s):\n${problems.map((p) => `  ${p.kind} ${p.subject}: ${p.detail}`).join('\n')}`,
        ]
          .filter((s) => s !== '')
          .join('\n'),
      );
      if (problems.length > 0) setExit(EXIT.failed);
    });

  program
    .command('gc')
    .description('remove from store and registry what no ref (and no live sandbox) reaches')
    .option('--dry-run', 'say what would be removed')
    .addOption(
      option(
        '--grace <duration>',
        'keep anything younger than this; in the registry, also how long unreached blobs stay condemned before a gc deletes them (0: none)',
        opt.duration({ min: 0 }),
        { value: 3_600_000, shown: '1h' },
      ),
    )
    .addOption(new Option('--store-only', 'leave the registry alone').conflicts('registryOnly'))
    .option('--registry-only', 'leave the store alone')
    .action(async (o: { dryRun?: boolean; grace: number; storeOnly?: boolean; registryOnly?: boolean }) => {
      const ctx = await storeContext(globals());
      const [{ reapStale, shiftedLayersObsolete }, { gcStore }, { gcRegistry }, { storeOwners }, { removeDeadLeftovers }, { Snapshots }] = await Promise.all([
        import('../runtime/open.js'),
        import('../store/gc.js'),
        import('../registry/gc.js'),
        import('../store/owners.js'),
        import('../store/leftovers.js'),
        import('../runtime/snapshot.js'),
      ]);
      const graceMs = o.grace;
      const dryRun = o.dryRun === true;
      // Sandboxes left by a crashed runtime hold leases and mounts: reclaim them first; then what
      // killed commands left (whatever its age), and snapshots a killed server left half made.
      const reaped = o.registryOnly || dryRun ? 0 : await reapStale(ctx.store);
      if (!o.registryOnly && !dryRun) {
        await removeDeadLeftovers(ctx.store);
        await new Snapshots(ctx.store, ctx.registry).reapUnfinished();
      }
      const store = o.registryOnly
        ? null
        : await gcStore(ctx.store, { graceMs, dryRun, owners: await storeOwners(), dropShifted: await shiftedLayersObsolete(ctx.store) });
      const registry = o.storeOnly ? null : await gcRegistry(ctx.registry, { graceMs, dryRun });
      const grace = formatDuration(graceMs);
      const removing = dryRun ? 'would remove' : 'removed';
      ctx.out.result({ dryRun, graceMs, reapedSandboxes: reaped, store, registry }, () =>
        [
          dryRun ? '(dry run: nothing removed)' : '',
          reaped > 0 ? `reclaimed ${reaped} stale sandbox(es)` : '',
          store
            ? `store: ${removing} ${store.removedLayers.length} layers (${formatBytes(store.removedLayerBytes)} of files), ` +
              `${store.removedLinks} pooled files, ${store.removedObjects} staged objects, ${store.removedTmp} leftovers` +
              `${dryRun ? '' : `; ${formatBytes(store.freedBytes)} freed`}`
            : '',
          store
            ? `store: kept ${store.keptLayers.reached} layers a pulled tag reaches, ${store.keptLayers.leased} leased by live sandboxes, ` +
              `${store.keptLayers.young} younger than the grace period (${grace})`
            : '',
          registry
            ? `registry: ${removing} ${registry.removedBlobs.length} blobs (${formatBytes(registry.freedBytes)}), ` +
              `${registry.removedPacks.length} catalog entries`
            : '',
          registry
            ? `registry: kept ${registry.kept.reachable.blobs} blobs a tag reaches (${formatBytes(registry.kept.reachable.bytes)}), ` +
              `${registry.kept.young.blobs} younger than the grace period (${grace}: ${formatBytes(registry.kept.young.bytes)}), ` +
              `${registry.kept.condemned.blobs} unreached and condemned (${formatBytes(registry.kept.condemned.bytes)})`
            : '',
          registry && registry.condemnedBlobs.length > 0
            ? `registry: condemned blobs go in a gc at least ${grace} after their condemnation (\`--grace 0\` removes unreached blobs at once; ` +
              'only where no push is running)'
            : '',
          ...(dryRun && registry ? registry.removedBlobs.map((b) => `  would remove ${b.digest} (${formatBytes(b.size)})`) : []),
          ...(dryRun && store ? store.removedLayers.map((l) => `  would remove layer ${l}`) : []),
        ]
          .filter((s) => s !== '')
          .join('\n'),
      );
    });

  program
    .command('audit')
    .description('storage used against one container image per ref')
    .option('--all', 'count the build cache refs (_cache/...) as images too')
    .option('--html <file>', 'also write a self-contained HTML report (tables and a chart, no network needed)')
    .action(async (o: { all?: boolean; html?: string }) => {
      const ctx = await makeContext(globals());
      const [{ audit }, { auditHtml }] = await Promise.all([import('../audit/audit.js'), import('../audit/html.js')]);
      const r = await audit(ctx.registry, { includeInternal: o.all === true });
      if (o.html !== undefined) {
        // a report path in a directory not made yet is made, as `-o dir/file` of most tools
        await mkdir(dirname(resolve(o.html)), { recursive: true });
        await writeFile(o.html, auditHtml(r));
      }
      const t = r.totals;
      const pct = (x: number): string => `${(x * 100).toFixed(2)}%`;
      ctx.out.result(r, () =>
        [
          table([['REF', 'LAYERS', 'FILES', 'IMAGE BYTES'], ...r.refs.map((x) => [x.ref, String(x.layers), String(x.files), formatBytes(x.logicalBytes)])]),
          '',
          "uncompressed (a node's disk):",
          `  one image per ref:            ${formatBytes(t.logicalBytes)}`,
          `  identical layers shared:      ${formatBytes(t.dockerStyleBytes)}`,
          `  minisandbox store:            ${formatBytes(t.uniqueContentBytes)} (${t.distinctObjects} distinct files; ` +
            `${pct(t.uniqueToLogical)} of one image per ref)`,
          'compressed (a registry):',
          ...(t.imageRefs > 0
            ? [`  source images' layers:        ${formatBytes(t.imageCompressedBytes)} (${t.imageRefs} of ${t.refs} refs imported from images)`]
            : []),
          `  minisandbox registry:         ${formatBytes(t.reachedRegistryBytes)} the refs reach` +
            (t.imageRefs === t.refs && t.imageRefs > 0 ? ` (${pct(t.reachedRegistryBytes / t.imageCompressedBytes)} of the images')` : ''),
          `  registry on disk, in all:     ${formatBytes(t.registryBytes)} (with the build cache and unreached blobs until gc)`,
          ...(r.datasets.length > 1
            ? [
                '',
                table([
                  ['DATASET', 'REFS', 'IMAGES', 'REGISTRY', 'PER ADDED REF'],
                  ...r.datasets.map((d) => [
                    d.dataset,
                    String(d.refs),
                    formatBytes(d.perTaskBytes),
                    formatBytes(d.registryBytes),
                    d.refs > 1 ? formatBytes(d.marginalRegistryBytes) : '-',
                  ]),
                ]),
              ]
            : []),
          ...(t.unpullableRefs > 0
            ? ['', `${t.unpullableRefs} ref(s) would not pull:`, ...r.refs.filter((x) => !x.pullable).map((x) => `  ${x.ref}: ${x.problem ?? ''}`)]
            : []),
          ...(o.html !== undefined ? [`report written to ${o.html}`] : []),
        ].join('\n'),
      );
    });
}
