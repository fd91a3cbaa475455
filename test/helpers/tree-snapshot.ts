/**
 * An independent description of a directory tree for round-trip assertions: it shares no code
 * with capture, so a bug there cannot hide itself. Hardlinks are described as groups of paths.
 */
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { lstatSync, readFileSync, readdirSync, readlinkSync } from 'node:fs';

export interface NodeInfo {
  type: string;
  mode: string;
  uid: number;
  gid: number;
  mtimeNs: string;
  size?: number;
  sha?: string;
  target?: string;
  rdev?: string;
  xattrs?: Record<string, string>;
  links?: string[];
}

function typeOf(st: import('node:fs').BigIntStats): string {
  if (st.isDirectory()) return 'dir';
  if (st.isFile()) return 'file';
  if (st.isSymbolicLink()) return 'symlink';
  if (st.isFIFO()) return 'fifo';
  if (st.isCharacterDevice()) return 'char';
  if (st.isBlockDevice()) return 'block';
  return 'other';
}

function xattrsOf(path: Buffer): Record<string, string> | undefined {
  let out: string;
  try {
    out = execFileSync('getfattr', ['-h', '-d', '-m', '-', '-e', 'hex', '--absolute-names', path.toString('latin1')], {
      encoding: 'utf8',
      stdio: ['ignore', 'pipe', 'ignore'],
    });
  } catch {
    return undefined;
  }
  const r: Record<string, string> = {};
  for (const line of out.split('\n')) {
    const m = /^([^#=][^=]*)=(.*)$/.exec(line);
    if (m) r[m[1]!] = m[2]!;
  }
  return Object.keys(r).length > 0 ? r : undefined;
}

export function snapshotTree(root: string, opts: { xattrs?: boolean; idShift?: number } = {}): Record<string, NodeInfo> {
  const out: Record<string, NodeInfo> = {};
  const inodes = new Map<string, string[]>();
  const shift = opts.idShift ?? 0;
  const walk = (abs: Buffer, rel: string): void => {
    for (const name of readdirSync(abs, { encoding: 'buffer' })) {
      const a = Buffer.concat([abs, Buffer.from('/'), name]);
      const r = rel === '' ? name.toString('latin1') : `${rel}/${name.toString('latin1')}`;
      const st = lstatSync(a, { bigint: true });
      const info: NodeInfo = {
        type: typeOf(st),
        mode: (Number(st.mode) & 0o7777).toString(8),
        uid: Number(st.uid) - shift,
        gid: Number(st.gid) - shift,
        mtimeNs: st.mtimeNs.toString(),
      };
      if (info.type === 'file') {
        info.size = Number(st.size);
        info.sha = createHash('sha256').update(readFileSync(a)).digest('hex');
        if (st.nlink > 1n) {
          const k = `${st.dev}:${st.ino}`;
          inodes.set(k, [...(inodes.get(k) ?? []), r]);
        }
      }
      if (info.type === 'symlink') info.target = readlinkSync(a, { encoding: 'buffer' }).toString('latin1');
      if (info.type === 'char' || info.type === 'block') info.rdev = st.rdev.toString();
      if (opts.xattrs !== false) {
        const x = info.type === 'symlink' ? undefined : xattrsOf(a);
        if (x) info.xattrs = x;
      }
      out[r] = info;
      if (info.type === 'dir') walk(a, r);
    }
  };
  walk(Buffer.from(root), '');
  for (const group of inodes.values()) {
    if (group.length < 2) continue;
    const sorted = [...group].sort();
    for (const p of group) out[p]!.links = sorted;
  }
  return out;
}
