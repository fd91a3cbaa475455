/**
 * Snapshots: a running sandbox's writable layer frozen into a content-addressed layer, the same
 * manifest and pack format as every other layer (its upper dir captured as a build captures one:
 * whiteouts and opaque dirs included), stacked on the sandbox's environment.
 *
 * A node keeps its snapshots in a registry of their own inside its store
 * (`<store>/snapshots/registry`: only the snapshot layers' packs; the layers below stay in the
 * node's registry, read through a FallbackRegistry) under `snapshots/<id>`, laid out in the store
 * like any pulled environment. Its store ref is what keeps it through `gc`, and a sandbox started
 * from it leases its layers like any other; pushed, it becomes an environment of the node's
 * registry (the parent's layers plus this one) that another node creates from by ref.
 *
 * The capture is consistent while the sandbox runs: its processes are held (frozen in its cgroup,
 * or stopped by user namespace without one: sandbox/freeze.ts) from the first file read until the
 * contents are packed; and safe whatever they do, since it never follows a link (layer/capture.ts).
 * Without root, the capture runs in a child with the rights of the sandbox's id range over its
 * files (runtime/snapshot-capture.ts), since this process may not read what the sandbox owns.
 *
 * A snapshot exists once its record (`<id>.json`) is written, last. Before anything else of it, a
 * marker `<id>.taking` names its taker (pid and start time): a taker killed part way (a `serve`
 * killed mid-snapshot) leaves a marker of a dead process beside what it had made (packs, the ref,
 * a laid-out layer), which reapUnfinished removes (`serve` at start, `gc`); a ref without a record
 * whose taker is not alive (a delete killed part way) goes the same way. A live taker's is never
 * touched, and a snapshot whose record was written stays.
 */
import { randomBytes } from 'node:crypto';
import { mkdir, readFile, readdir, rename, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { z } from 'zod';
import { type Digest, DigestSchema, digestHex } from '../cas/digest.js';
import { parseRefName } from '../cas/ref-name.js';
import { InvalidInputError, MinisandboxError, NotFoundError } from '../errors.js';
import { idShiftOf } from '../host/subid.js';
import type { EnvConfig } from '../layer/env.js';
import { type PushResult, pushTree } from '../publish/push.js';
import { copyRefs } from '../registry/copy.js';
import { FallbackRegistry } from '../registry/fallback.js';
import { gcRegistry } from '../registry/gc.js';
import { LocalRegistry } from '../registry/local.js';
import type { Registry } from '../registry/registry.js';
import { resolveEnv } from '../registry/resolve-env.js';
import type { Sandbox, SandboxOrigin } from '../sandbox/index.js';
import { freezeSandbox } from '../sandbox/freeze.js';
import type { SandboxState } from '../sandbox/state.js';
import { liveLeases } from '../store/leases.js';
import { ownersFor, removeOwnedTree } from '../store/owners.js';
import type { StorePaths } from '../store/paths.js';
import { pullEnv } from '../store/pull.js';
import { ownedName, ownerGone, ownerOfName } from '../util/owned-name.js';
import { processStartTime, sameProcessAlive } from '../util/process.js';
import { layerIdShift, layerMapping, openSandbox, type OpenOptions } from './open.js';
import { probeHost } from '../sandbox/host.js';
import { captureRootlessWrites } from './snapshot-capture.js';

export const SNAPSHOT_ID_RE = /^snap-[0-9a-f]{16}$/;

export const SnapshotRecordSchema = z.strictObject({
  id: z.string().regex(SNAPSHOT_ID_RE),
  /** The environment: the sandbox's layers plus the snapshot's (and a fork's frozen copies'). */
  env: DigestSchema,
  /** The top layer: what the sandbox had written. */
  layer: DigestSchema,
  /** The ref the sandbox was opened from (or its snapshot's parent ref). */
  parentRef: z.string().optional(),
  parentEnv: DigestSchema,
  sandbox: z.string(),
  createdAt: z.string(),
  /** Bytes of the files in the top layer. */
  size: z.number().int().min(0),
  /** Refs of the node's registry it was pushed to. */
  pushed: z.array(z.string()).default([]),
});
export type SnapshotRecord = z.output<typeof SnapshotRecordSchema>;

/** `<id>.taking`: who is taking the snapshot, written before anything of it exists. */
const TakerSchema = z.strictObject({ pid: z.number().int().positive(), startTime: z.string().optional() });

export class SnapshotInUseError extends MinisandboxError {
  constructor(id: string, users: string[]) {
    super('SNAPSHOT_IN_USE', `snapshot ${id} is in use by ${users.join(', ')}`, {
      hint: 'destroy (or reset) the sandboxes started from it first, then delete it',
    });
  }
}

function newSnapshotId(): string {
  return `snap-${randomBytes(8).toString('hex')}`;
}

export function snapshotRef(id: string): string {
  return `snapshots/${id}`;
}

/** A snapshot's laid-out environment: what a sandbox is created or reset over. */
export interface SnapshotLayout {
  record: SnapshotRecord;
  lowerDirs: string[];
  origin: SandboxOrigin;
}

export class Snapshots {
  readonly local: LocalRegistry;
  /** The snapshots' registry, read through to the node's for the layers below them. */
  readonly view: Registry;
  private readonly dir: string;

  constructor(
    readonly store: StorePaths,
    readonly registry: Registry,
    /** Options every open from a snapshot gets (the server's git stat cache). */
    private readonly openDefaults: Pick<OpenOptions, 'gitStatCache'> = {},
  ) {
    this.dir = join(store.root, 'snapshots');
    this.local = new LocalRegistry(join(this.dir, 'registry'));
    this.view = new FallbackRegistry(this.local, registry);
  }

  private recordPath(id: string): string {
    return join(this.dir, `${id}.json`);
  }

  private takerPath(id: string): string {
    return join(this.dir, `${id}.taking`);
  }

  private async writeRecord(r: SnapshotRecord): Promise<void> {
    await mkdir(this.dir, { recursive: true, mode: 0o700 });
    const p = this.recordPath(r.id);
    // named after its writer (reapUnfinished removes one a dead writer left)
    const tmp = join(this.dir, ownedName(`${r.id}.json.`, `${randomBytes(4).toString('hex')}.tmp`));
    await writeFile(tmp, JSON.stringify(SnapshotRecordSchema.parse(r)));
    await rename(tmp, p);
  }

  private async hasRecord(id: string): Promise<boolean> {
    return await this.get(id).then(
      () => true,
      () => false,
    );
  }

  /** Whether a live process is taking snapshot `id` (its marker names it). */
  private async takenNow(id: string): Promise<boolean> {
    const text = await readFile(this.takerPath(id), 'utf8').catch(() => undefined);
    if (text === undefined) return false;
    let json: unknown;
    try {
      json = JSON.parse(text);
    } catch {
      return false;
    }
    const t = TakerSchema.safeParse(json);
    return t.success && sameProcessAlive(t.data.pid, t.data.startTime);
  }

  /**
   * Removes what a snapshot without a record left: its ref (here and in the store), and its laid-out
   * layer unless a recorded snapshot has the same one or a live sandbox leases it. Its packs go with
   * the next collection of the snapshots' registry.
   */
  private async discard(id: string): Promise<void> {
    const tag = snapshotRef(id);
    const env =
      (await this.local.getRef(tag).catch(() => null)) ??
      (await readFile(this.store.ref(tag), 'utf8').then(
        (t) => t.trim(),
        () => null,
      ));
    const layer = env === null ? undefined : (await resolveEnv(this.view, env).catch(() => undefined))?.config.layers.at(-1)?.digest;
    await this.local.deleteRef(tag);
    await rm(this.store.ref(tag), { force: true });
    if (layer !== undefined) await this.removeLaidOut(layer);
  }

  /** The laid-out dirs of `layer`, unless a recorded snapshot has it or a live sandbox leases them. */
  private async removeLaidOut(layer: Digest): Promise<void> {
    if ((await this.list()).some((r) => r.layer === layer)) return;
    const layerHex = digestHex(layer);
    const leased = new Set((await liveLeases(this.store)).flatMap((l) => l.layers));
    for (const n of await readdir(this.store.layersDir).catch(() => [] as string[])) {
      if (n.split('+')[0] !== layerHex || leased.has(n)) continue;
      const shift = Number(n.split('+')[1] ?? 0);
      await removeOwnedTree(await ownersFor(shift), join(this.store.layersDir, n));
    }
  }

  /**
   * Removes every snapshot a dead process left half made (see the module's comment), and record
   * files a dead writer left half written; returns the ids removed. Never one a live process takes.
   */
  async reapUnfinished(): Promise<string[]> {
    const names = await readdir(this.dir).catch(() => [] as string[]);
    const ids = new Set<string>();
    for (const n of names) {
      const id = n.split('.')[0] ?? '';
      if (!SNAPSHOT_ID_RE.test(id)) continue;
      if (n === `${id}.taking`) ids.add(id);
      const writer = ownerOfName(n, `${id}.json.`);
      if (writer !== null && n.endsWith('.tmp') && ownerGone(writer)) await rm(join(this.dir, n), { force: true });
    }
    for await (const r of this.local.listRefs()) if (r.name.startsWith('snapshots/')) ids.add(r.name.slice('snapshots/'.length));
    for (const f of await readdir(this.store.refsDir).catch(() => [] as string[])) if (f.startsWith('snapshots%')) ids.add(f.slice('snapshots%'.length));
    const reaped: string[] = [];
    for (const id of [...ids].sort()) {
      if (!SNAPSHOT_ID_RE.test(id) || (await this.takenNow(id))) continue;
      if (!(await this.hasRecord(id))) {
        await this.discard(id);
        reaped.push(id);
      }
      await rm(this.takerPath(id), { force: true });
    }
    // their packs, once unreachable for a grace period (gc condemns first: a snapshot being taken meanwhile keeps its blobs)
    if (reaped.length > 0) await gcRegistry(this.local, { graceMs: 10 * 60_000, dryRun: false });
    return reaped;
  }

  async get(id: string): Promise<SnapshotRecord> {
    const text = SNAPSHOT_ID_RE.test(id) ? await readFile(this.recordPath(id), 'utf8').catch(() => undefined) : undefined;
    const parsed = text === undefined ? undefined : SnapshotRecordSchema.safeParse(JSON.parse(text) as unknown);
    if (parsed === undefined || !parsed.success)
      throw new NotFoundError(`snapshot ${id}`, "list this node's snapshots with GET /v1/snapshots (or Snapshots.list())");
    return parsed.data;
  }

  async list(): Promise<SnapshotRecord[]> {
    const names = await readdir(this.dir).catch(() => [] as string[]);
    const out: SnapshotRecord[] = [];
    for (const n of names.sort()) {
      const id = n.replace(/\.json$/, '');
      if (!n.endsWith('.json') || !SNAPSHOT_ID_RE.test(id)) continue;
      const r = await this.get(id).catch(() => undefined);
      if (r !== undefined) out.push(r);
    }
    return out;
  }

  /**
   * Freezes the sandbox's writes into a snapshot laid out in the store; with `push`, also
   * publishes it to the node's registry under `tag` (default `snapshots/<id>`).
   */
  async take(sb: Sandbox, opts: { push?: boolean; tag?: string } = {}): Promise<SnapshotRecord> {
    if (opts.tag !== undefined) parseRefName(opts.tag);
    const origin = sb.origin;
    if (origin === undefined)
      throw new InvalidInputError(
        `sandbox ${sb.id} was not opened from an environment`,
        'snapshot sandboxes made by openSandbox (or the server), not createSandbox',
      );
    if (!sb.alive) throw new MinisandboxError('SANDBOX_DESTROYED', `sandbox ${sb.id} was destroyed`, { hint: 'snapshot a live sandbox' });
    const id = newSnapshotId();
    await mkdir(this.dir, { recursive: true, mode: 0o700 });
    await writeFile(this.takerPath(id), JSON.stringify({ pid: process.pid, startTime: processStartTime(process.pid) }), { flag: 'wx' });
    let record: SnapshotRecord;
    try {
      record = await this.capture(sb, id, origin);
    } catch (e) {
      // what was made of it goes, as a later reapUnfinished would remove it
      await this.discard(id).catch(() => undefined);
      throw e;
    } finally {
      await rm(this.takerPath(id), { force: true });
    }
    if (opts.push === true) return this.push(id, opts.tag);
    return record;
  }

  /** The snapshot's layers pushed to the snapshots' registry and laid out, then its record: what take does under its marker. */
  private async capture(sb: Sandbox, id: string, origin: SandboxOrigin): Promise<SnapshotRecord> {
    const tag = snapshotRef(id);
    const state = sb.state;
    const parent: { digest: Digest; config: EnvConfig } = origin.env;
    const lowers = state.lowerDirs.slice(origin.env.config.layers.length);
    // an unprivileged user cannot read what its sandbox's ids own: a child with those rights captures (snapshot-capture.ts)
    const pushed = sb.host.isRoot
      ? await this.captureAsRoot(state, parent, lowers, tag)
      : await captureRootlessWrites(this.store, this.local.root, state, parent, lowers, tag);
    // laid out now (and a store ref written: what keeps it through gc), so a create from it starts at once
    await this.layOut(tag);
    const record: SnapshotRecord = {
      id,
      env: pushed.env,
      layer: pushed.layer.digest,
      ...(origin.ref === undefined ? {} : { parentRef: origin.ref }),
      parentEnv: origin.env.digest,
      sandbox: sb.id,
      createdAt: new Date().toISOString(),
      size: pushed.layer.size,
      pushed: [],
    };
    await this.writeRecord(record);
    return record;
  }

  /** The frozen lowers (a fork child's copies of its parents' writes), then the upper, pushed from this process. */
  private async captureAsRoot(state: SandboxState, parent: { digest: Digest; config: EnvConfig }, lowers: string[], tag: string): Promise<PushResult> {
    for (const dir of lowers) {
      const r = await pushTree(this.local, this.store, dir, { parent, overlayUpper: true, idShift: state.idmapLowers === true ? 0 : idShiftOf(state.idMap) });
      parent = await resolveEnv(this.view, r.env);
    }
    const upper = state.upperKind === 'tmpfs' ? `/proc/${state.holderPid}/root${state.upperDir}/u` : join(state.upperDir, 'u');
    let thaw: (() => void) | undefined = await freezeSandbox(state);
    try {
      return await pushTree(this.local, this.store, upper, {
        parent,
        overlayUpper: true,
        idShift: idShiftOf(state.idMap),
        keepRootPath: state.upperKind === 'tmpfs',
        tag,
        // packed: nothing reads the upper after this
        onProgress: (p) => {
          if (p.phase === 'upload') {
            thaw?.();
            thaw = undefined;
          }
        },
      });
    } finally {
      thaw?.();
    }
  }

  private async layOut(tag: string): Promise<{ lowerDirs: string[]; digest: Digest; config: EnvConfig }> {
    const mapping = await layerMapping(this.store, await probeHost());
    const pulled = await pullEnv(this.view, this.store, tag, { idShift: layerIdShift(mapping) });
    return { lowerDirs: pulled.layerDirs, digest: pulled.digest, config: pulled.env };
  }

  /** The snapshot's environment laid out (again, if a gc took it): what to create or reset over. */
  async layout(id: string): Promise<SnapshotLayout> {
    const record = await this.get(id);
    const l = await this.layOut(snapshotRef(id));
    return {
      record,
      lowerDirs: l.lowerDirs,
      origin: { env: { digest: l.digest, config: l.config }, ...(record.parentRef === undefined ? {} : { ref: record.parentRef }) },
    };
  }

  /** A new sandbox started from the snapshot. */
  async open(id: string, opts: OpenOptions = {}): Promise<Sandbox> {
    const record = await this.get(id);
    const sb = await openSandbox(this.view, this.store, snapshotRef(id), { ...this.openDefaults, ...opts });
    if (record.parentRef !== undefined) sb.origin = sb.creationOrigin = { ...sb.origin!, ref: record.parentRef };
    return sb;
  }

  /** Publishes the snapshot's environment to the node's registry under `tag` (default `snapshots/<id>`). */
  async push(id: string, tag = snapshotRef(id)): Promise<SnapshotRecord> {
    parseRefName(tag);
    const record = await this.get(id);
    // copyRefs copies a ref under its own name: an alias in the snapshots' registry names it `tag`
    const alias = tag === snapshotRef(id) ? undefined : tag;
    if (alias !== undefined) await this.local.putRef(alias, record.env);
    try {
      await copyRefs(this.view, this.registry, [tag], { tmpDir: this.store.tmpDir });
    } finally {
      if (alias !== undefined) await this.local.deleteRef(alias);
    }
    const updated = { ...record, pushed: [...new Set([...record.pushed, tag])] };
    await this.writeRecord(updated);
    return updated;
  }

  /**
   * Removes the snapshot: refused while a live sandbox runs over its layer (a sandbox made from
   * it, reset to it, or a fork of those), so nothing in use is pulled from under it. What was
   * pushed to the node's registry stays there (delete those refs there).
   */
  async delete(id: string): Promise<void> {
    const record = await this.get(id);
    const layerHex = digestHex(record.layer);
    const users = (await liveLeases(this.store)).filter((l) => l.layers.some((n) => n.split('+')[0] === layerHex)).map((l) => l.id);
    if (users.length > 0) throw new SnapshotInUseError(id, users);
    await rm(this.recordPath(id), { force: true });
    await this.local.deleteRef(snapshotRef(id));
    await rm(this.store.ref(snapshotRef(id)), { force: true });
    // its laid-out layer, unless another snapshot has the very same one ...
    await this.removeLaidOut(record.layer);
    // ... and its packs, once unreachable for a grace period (gc condemns first: a snapshot being taken meanwhile keeps its blobs)
    await gcRegistry(this.local, { graceMs: 10 * 60_000, dryRun: false });
  }
}
