/**
 * Where a build sandbox's writes go. In RAM (a size-capped tmpfs upper) when the host has room:
 * on hosts that drop clean page cache within seconds (measured here: a freshly written 100 MB
 * file on ext4 was out of the cache 5 s later, the same file on tmpfs stayed), a disk upper makes
 * the install commands read back from disk what they just wrote (apt's lists, the downloaded
 * .debs, unpacked sources being byte-compiled) and the capture re-read the whole upper from disk.
 * A tmpfs cannot be reclaimed without swap, so each one is capped at a share of the memory
 * available when the build starts, divided among the nodes built at once; a build that outgrows
 * its cap runs again on disk (see build-node.ts), so large environments (conda, GBs) still build.
 */
import { readFileSync } from 'node:fs';
import { statfs } from 'node:fs/promises';
import { freemem } from 'node:os';

/** The share of available memory all concurrent build uppers may take together. */
const RAM_SHARE = 0.5;
/** Below this a RAM upper is not worth a likely second run on disk. */
const MIN_RAM_UPPER = 512 << 20;

/** Bytes of memory the kernel could hand out now (MemAvailable), or free memory where unknown. */
export function availableMemory(meminfo?: string): number {
  let text = meminfo;
  if (text === undefined) {
    try {
      text = readFileSync('/proc/meminfo', 'utf8');
    } catch {
      return freemem();
    }
  }
  const m = /^MemAvailable:\s+(\d+) kB$/m.exec(text);
  return m === null ? freemem() : Number(m[1]) * 1024;
}

/**
 * The size cap of each build sandbox's RAM upper when `jobs` build at once; 0 means uppers go to
 * disk. Pure given the available memory, so the policy is testable.
 */
export function ramUpperBytes(jobs: number, available: number): number {
  const each = Math.floor((available * RAM_SHARE) / Math.max(1, jobs) / (1 << 20)) * (1 << 20);
  return each >= MIN_RAM_UPPER ? each : 0;
}

/** Marks a build that failed because its RAM upper filled up: the caller builds it again on disk. */
export class UpperFullError extends Error {
  constructor(readonly capBytes: number) {
    super(`the build wrote more than its ${Math.round(capBytes / (1 << 20))} MiB RAM upper holds`);
  }
}

/**
 * Whether a failed build ran out of room in its tmpfs upper: the tmpfs is close to full, or the
 * output names ENOSPC (a large write can fail with some room left). A false positive costs only
 * a second run on disk that fails the same way.
 */
export async function upperFull(upperMount: string, output: string): Promise<boolean> {
  if (/No space left on device|ENOSPC|Errno 28/.test(output)) return true;
  try {
    const s = await statfs(upperMount);
    const free = s.bavail * s.bsize;
    return free < Math.max(64 << 20, (s.blocks * s.bsize) / 20);
  } catch {
    return false;
  }
}
