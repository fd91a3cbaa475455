/**
 * The node-local store: everything a node keeps between pulls.
 *
 *   objects/<hex>                    (older stores) staged contents; gc removes them
 *   links/<hex>                      the pool: one inode per (content, mode, owner, mtime, xattrs); layer
 *   links/<hex>.<meta key>           files are hardlinks to these, so identical files share disk across
 *                                    layers. `<hex>` is the first inode of a content (any metadata but
 *                                    xattrs: a lay-out compares its stat), `<hex>.<key>` one for other
 *                                    metadata. Flat: a directory per content cost a mkdir per file.
 *   links/<hex>/<meta key>           (older stores) the same, a directory per content; gc removes them
 *   layers/<hex>/                    laid-out read-only layer trees with their real owners (the rename into
 *                                    place commits them): root's builds, export and idmapped sandboxes
 *   layers/<hex>+<idShift>/          the same with owners shifted: rootless stores, hosts without idmapped
 *                                    mounts, and stores of earlier versions (gc removes those)
 *   manifests/<hex>                  verified, uncompressed layer manifests
 *   indexes/<hex>                    cached pack index blobs (immutable, so cached forever)
 *   envs/<hex>.json                  environment configs that were pulled
 *   refs/<name with / as %>          what each pulled ref resolved to
 *   refused/<hex>                    why a pull (or verify) refused a layer's manifest: named by its digest, the
 *                                    finding holds for good; `ls` shows the refs reaching it as broken
 *   leases/<id>.json                 layers held by live sandboxes
 *   sandboxes/                       sandbox state dirs (runtime)
 *   locks/build-<kind>-<key hex>.lock a build of that node is running (its pid): another waits for it
 *   tmp/                             work in progress, e.g. stage-<pid>-<rand>/<hex>: verified objects of one pull
 *                                    waiting for lay-out; leftovers of crashes are removed by gc
 */
import { homedir } from 'node:os';
import { join, resolve } from 'node:path';
import { type Digest, digestHex } from '../cas/digest.js';

export function defaultStoreDir(): string {
  if (process.env.MINISANDBOX_STORE) return resolve(process.env.MINISANDBOX_STORE);
  if (process.getuid?.() === 0) return '/var/lib/minisandbox';
  const base = process.env.XDG_DATA_HOME ?? join(homedir(), '.local', 'share');
  return join(base, 'minisandbox');
}

export class StorePaths {
  readonly root: string;
  constructor(root: string) {
    this.root = resolve(root);
    this.linksDir = join(this.root, 'links');
  }
  object(d: Digest): string {
    return join(this.root, 'objects', digestHex(d));
  }
  get objectsDir(): string {
    return join(this.root, 'objects');
  }
  /** The pool inode named by content alone: present means the store holds this content. */
  poolPrimary(hex: string): string {
    // concatenated, not joined: a name per file of a lay-out, and `hex` is 64 hex digits
    return `${this.linksDir}/${hex}`;
  }
  /** The pool inode for a content with one exact metadata (`key` hashes it). */
  poolVariant(hex: string, key: string): string {
    return `${this.linksDir}/${hex}.${key}`;
  }
  readonly linksDir: string;
  layer(d: Digest, idShift: number): string {
    return join(this.root, 'layers', layerDirName(d, idShift));
  }
  get layersDir(): string {
    return join(this.root, 'layers');
  }
  manifest(d: Digest): string {
    return join(this.root, 'manifests', digestHex(d));
  }
  index(d: Digest): string {
    return join(this.root, 'indexes', digestHex(d));
  }
  env(d: Digest): string {
    return join(this.root, 'envs', `${digestHex(d)}.json`);
  }
  ref(name: string): string {
    return join(this.root, 'refs', name.replaceAll('/', '%'));
  }
  /** Why a pull would refuse the layer's manifest, if this store found that (store/refused.ts). */
  refused(d: Digest): string {
    return join(this.root, 'refused', digestHex(d));
  }
  get refsDir(): string {
    return join(this.root, 'refs');
  }
  get leasesDir(): string {
    return join(this.root, 'leases');
  }
  get sandboxesDir(): string {
    return join(this.root, 'sandboxes');
  }
  /** Locks of work that one process does and others wait for (a build node). */
  get locksDir(): string {
    return join(this.root, 'locks');
  }

  get tmpDir(): string {
    return join(this.root, 'tmp');
  }
}

export function layerDirName(d: Digest, idShift: number): string {
  return idShift === 0 ? digestHex(d) : `${digestHex(d)}+${idShift}`;
}
