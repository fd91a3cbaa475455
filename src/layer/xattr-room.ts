/**
 * How much room one file's extended attributes take on the store's file system, and the most it
 * may take: the rule an import applies to each entry, so that what it accepts every pull can lay
 * out. The rule is ext4's, the most common store file system and, with its default 4 KiB blocks,
 * the one that takes least: all of a file's attributes that do not fit in its inode share ONE
 * block. Each takes a 16-byte entry, its name without the namespace prefix (`user.`, `trusted.`,
 * `security.`, `system.`) rounded up to 4 bytes, and its value rounded up to 4 bytes; a block
 * holds 4096 - 32 (header) - 4 (end marker) = 4060 bytes of them. The inode's own room (about 90
 * bytes with 256-byte inodes) is not counted, so the rule errs on the safe side (measured on a
 * fresh `mkfs.ext4 -b 4096`: one attribute with a 1-byte name takes a 4040-byte value, not 4041;
 * two of 2000 and 2020 bytes fit together). xfs, btrfs and tmpfs take more (values of up to
 * 64 KiB). ext4 made with 1 KiB blocks (what mkfs picks below 512 MiB) takes less; a lay-out
 * there fails naming the attribute (fsmeta.ts).
 */

/** Bytes of attribute entries one 4 KiB ext4 block holds. */
export const XATTR_ROOM = 4096 - 32 - 4;
/** The kernel's longest attribute name (XATTR_NAME_MAX). */
export const XATTR_NAME_MAX = 255;

const PREFIX = /^(user|trusted|security|system)\./;
const round4 = (n: number): number => (n + 3) & ~3;

/** Bytes one attribute takes in an ext4 attribute block. */
export function xattrEntryBytes(name: string, valueBytes: number): number {
  return 16 + round4(Buffer.byteLength(name.replace(PREFIX, ''))) + round4(valueBytes);
}

/** Why a file's attributes (name -> value length) cannot be laid out everywhere, or undefined if they can. */
export function xattrsTooLarge(attrs: Iterable<[string, number]>): string | undefined {
  let total = 0;
  let largest: [string, number] | undefined;
  for (const [name, len] of attrs) {
    if (Buffer.byteLength(name) > XATTR_NAME_MAX)
      return `extended attribute name ${JSON.stringify(name.slice(0, 40))}... is longer than ${XATTR_NAME_MAX} bytes`;
    total += xattrEntryBytes(name, len);
    if (largest === undefined || len > largest[1]) largest = [name, len];
  }
  if (total <= XATTR_ROOM || largest === undefined) return undefined;
  return (
    `extended attribute ${largest[0]} (${largest[1]} bytes) does not fit: the file's attributes take ${total} bytes ` +
    `as ext4 stores them, and a store's file system takes at most ${XATTR_ROOM} (one 4 KiB ext4 block)`
  );
}
