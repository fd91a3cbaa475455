/**
 * Subordinate id ranges (/etc/subuid, /etc/subgid). Sandboxes map in-sandbox ids 0..count-1 to a
 * subordinate range, never to the caller's own id (and so never to host root).
 */
import { readFileSync } from 'node:fs';
import { appendFile } from 'node:fs/promises';
import { userInfo } from 'node:os';
import { z } from 'zod';
import { HostCapabilityError, InvalidInputError } from '../errors.js';
import { isErrno } from '../util/fs.js';

export const SubidEntrySchema = z.strictObject({
  owner: z.string().min(1),
  start: z.number().int().min(1),
  count: z.number().int().min(1),
});
export type SubidEntry = z.infer<typeof SubidEntrySchema>;

export const IdMapSchema = z.strictObject({
  uidStart: z.number().int().min(1),
  gidStart: z.number().int().min(1),
  /** How many ids (0..count-1 inside) are mapped. */
  count: z.number().int().min(1),
});
export type IdMap = z.infer<typeof IdMapSchema>;

/** Default size of a sandbox's id space: enough for any distribution's system and user ids. */
export const DEFAULT_ID_COUNT = 65536;
export const SUBUID_FILE = '/etc/subuid';
export const SUBGID_FILE = '/etc/subgid';

export function parseSubidFile(text: string): SubidEntry[] {
  const out: SubidEntry[] = [];
  for (const raw of text.split('\n')) {
    const line = raw.trim();
    if (line === '' || line.startsWith('#')) continue;
    const [owner, start, count] = line.split(':');
    const parsed = SubidEntrySchema.safeParse({ owner, start: Number(start), count: Number(count) });
    if (parsed.success) out.push(parsed.data);
  }
  return out;
}

/** The first range owned by the user (by name or numeric id) that holds at least `minCount` ids. */
export function findSubidRange(entries: SubidEntry[], user: { name: string; uid: number }, minCount: number): SubidEntry | undefined {
  return entries.find((e) => (e.owner === user.name || e.owner === String(user.uid)) && e.count >= minCount && !rangeHolds(e, user.uid));
}

function rangeHolds(e: SubidEntry, id: number): boolean {
  return id >= e.start && id < e.start + e.count;
}

export function currentUser(): { name: string; uid: number; gid: number } {
  const u = userInfo();
  return { name: u.username, uid: u.uid, gid: u.gid };
}

/** Synchronous: two small files on every sandbox start (no round trip through libuv's thread pool). */
async function readText(path: string): Promise<string> {
  try {
    return readFileSync(path, 'utf8');
  } catch (e) {
    if (isErrno(e, 'ENOENT')) return '';
    throw e;
  }
}

/**
 * The id map for the calling user's sandboxes. Fails with the exact line to add when the user has
 * no (large enough) subordinate range.
 */
export async function resolveIdMap(
  opts: { count?: number; subuidFile?: string; subgidFile?: string; user?: { name: string; uid: number } } = {},
): Promise<IdMap> {
  const count = opts.count ?? DEFAULT_ID_COUNT;
  const user = opts.user ?? currentUser();
  const subuidFile = opts.subuidFile ?? SUBUID_FILE;
  const subgidFile = opts.subgidFile ?? SUBGID_FILE;
  const uid = findSubidRange(parseSubidFile(await readText(subuidFile)), user, count);
  const gid = findSubidRange(parseSubidFile(await readText(subgidFile)), user, count);
  if (uid === undefined || gid === undefined) {
    const missing = [uid === undefined ? subuidFile : null, gid === undefined ? subgidFile : null].filter(Boolean).join(' and ');
    const line = `${user.name}:${suggestedStart(user.uid)}:${Math.max(count, DEFAULT_ID_COUNT)}`;
    throw new HostCapabilityError(
      `user ${user.name} has no subordinate id range of at least ${count} ids in ${missing}`,
      `add the line \`${line}\` to ${missing} (as root: \`echo ${line} >> /etc/subuid; echo ${line} >> /etc/subgid\`, ` +
        'or call ensureSubidRange() / run `bin/setup` as root); sandboxes map their ids there and never to your own id',
    );
  }
  return IdMapSchema.parse({ uidStart: uid.start, gidStart: gid.start, count });
}

function suggestedStart(uid: number): number {
  // Matches what useradd would allocate for root and stays clear of ordinary user ids.
  return uid === 0 ? 1_000_000 : 100_000 + (uid % 1000) * DEFAULT_ID_COUNT;
}

/**
 * Adds a subordinate range for `user` to /etc/subuid and /etc/subgid if it has none (root only).
 * Returns the lines added (empty when nothing was missing).
 */
export async function ensureSubidRange(
  opts: { user?: string; start?: number; count?: number; subuidFile?: string; subgidFile?: string } = {},
): Promise<string[]> {
  const me = currentUser();
  if (me.uid !== 0) {
    throw new HostCapabilityError(
      'only root can add subordinate id ranges',
      'run `sudo bin/setup`, or ask an administrator to add a range for you to /etc/subuid and /etc/subgid',
    );
  }
  const name = opts.user ?? me.name;
  if (!/^[a-z_][a-z0-9_.-]*\$?$/i.test(name)) throw new InvalidInputError(`invalid user name ${JSON.stringify(name)}`);
  const count = opts.count ?? 1_000_000_000;
  const start = opts.start ?? 1_000_000;
  const added: string[] = [];
  for (const file of [opts.subuidFile ?? SUBUID_FILE, opts.subgidFile ?? SUBGID_FILE]) {
    const text = await readText(file);
    if (parseSubidFile(text).some((e) => e.owner === name)) continue;
    const line = `${name}:${start}:${count}`;
    await appendFile(file, `${text === '' || text.endsWith('\n') ? '' : '\n'}${line}\n`);
    added.push(`${file}: ${line}`);
  }
  return added;
}

/**
 * An owner shift given by hand (`pull --id-shift N`): 0 (the layer's own owners, root only) or
 * the start of `count` ids that lie inside a subordinate range of /etc/subuid and one of
 * /etc/subgid. Anything else would give a layer's files owners no sandbox maps (or host ids of
 * real users: -3 became uid 4294967293).
 */
export async function checkIdShift(text: string, opts: { count?: number; subuidFile?: string; subgidFile?: string } = {}): Promise<number> {
  const count = opts.count ?? DEFAULT_ID_COUNT;
  const shift = /^\d{1,10}$/.test(text.trim()) ? Number(text.trim()) : Number.NaN;
  if (!Number.isSafeInteger(shift))
    throw new InvalidInputError(
      `invalid --id-shift ${JSON.stringify(text)}`,
      'give `auto`, 0, or the start of a subordinate id range of /etc/subuid and /etc/subgid',
    );
  if (shift === 0) return 0;
  const inside = (entries: SubidEntry[]): boolean => entries.some((e) => shift >= e.start && shift + count <= e.start + e.count);
  const uids = parseSubidFile(await readText(opts.subuidFile ?? SUBUID_FILE));
  const gids = parseSubidFile(await readText(opts.subgidFile ?? SUBGID_FILE));
  if (!inside(uids) || !inside(gids)) {
    throw new InvalidInputError(
      `--id-shift ${shift}: ids ${shift}..${shift + count - 1} are not inside one subordinate ` +
        `range of ${opts.subuidFile ?? SUBUID_FILE} and one of ${opts.subgidFile ?? SUBGID_FILE}`,
      "give `auto` (what this host's sandboxes use), 0, or the start of a range listed there",
    );
  }
  return shift;
}

/** Layers are laid out with one shift for owners and groups, so the two ranges must start together. */
export function idShiftOf(idMap: { uidStart: number; gidStart: number }): number {
  if (idMap.uidStart !== idMap.gidStart) {
    throw new HostCapabilityError(
      `the subordinate uid range starts at ${idMap.uidStart} but the gid range at ${idMap.gidStart}`,
      'give this user ranges with the same start in /etc/subuid and /etc/subgid',
    );
  }
  return idMap.uidStart;
}
