/**
 * An attacker inside a sandbox for snapshot tests: a ring of processes that continue each other
 * (SIGCONT), so a SIGSTOP sweep must outrun them, keeps a flipper running that swaps directories
 * of the upper for absolute symlinks to a host directory (holding a secret the capture must never
 * read) and back; and what to search for that secret afterwards.
 */
import { execFileSync } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';

/**
 * `dirs` ring members; member 0 writes a new decoy `s` (`size` bytes, a new object each time)
 * into each of /root/w/d0..d<dirs-1>, then turns them all into symlinks to `hostDir` (the dirs
 * kept as x0..) and back; the others only continue every member, forever. /root/ring/pids has
 * one line per member once all run.
 */
export function swapRingScript(hostDir: string, size: number, dirs = 8): string {
  // `j`: each member's own `i` says which member it is
  const all = (body: string): string => `for j in ${Array.from({ length: dirs }, (_, i) => i).join(' ')}; do ${body}; done`;
  const flip = [
    'n=$((n+1))',
    all(`printf '%0${size}d' $n > /root/w/d$j/s`),
    all(`mv /root/w/d$j /root/w/x$j; ln -s ${hostDir} /root/w/d$j`),
    all('rm /root/w/d$j; mv /root/w/x$j /root/w/d$j'),
  ].join('; ');
  return [
    `R=/root/ring; mkdir -p $R /root/w; ${all(`mkdir /root/w/d$j; printf '%0${size}d' 0 > /root/w/d$j/s`)}`,
    `for i in ${Array.from({ length: dirs }, (_, i) => i).join(' ')}; do`,
    `  ( n=0; while [ ! -f $R/go ]; do :; done; P=$(cat $R/pids); ` +
      `while :; do kill -CONT $P 2>/dev/null; if [ $i = 0 ]; then ${flip}; fi; done ) </dev/null >/dev/null 2>&1 &`,
    '  echo $! >> $R/pids',
    'done',
    'touch $R/go',
  ].join('\n');
}

/** A shell line printing each decoy the flipper's dirs hold (d$i or, mid-swap, x$i), one per line. */
export function decoysCommand(dirs = 8): string {
  return `for i in $(seq 0 ${dirs - 1}); do cat /root/w/d$i/s /root/w/x$i/s 2>/dev/null; echo; done`;
}

/** Every file below `dir`, zstd-decompressed where it is zstd, as one buffer each. */
export function blobsUnder(dir: string): Buffer[] {
  const out: Buffer[] = [];
  for (const e of readdirSync(dir, { recursive: true, withFileTypes: true })) {
    if (!e.isFile()) continue;
    const p = join(e.parentPath, e.name);
    out.push(readFileSync(p));
    try {
      out.push(execFileSync('zstd', ['-dcq', p], { maxBuffer: 256 << 20, stdio: ['ignore', 'pipe', 'ignore'] }));
    } catch {
      // not zstd
    }
  }
  return out;
}
