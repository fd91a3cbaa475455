/**
 * Throwing away a build sandbox's upper dir off the build's critical path. Once the upper dir is
 * captured and published nothing reads it again, yet deleting it (thousands of freshly written
 * files) took 0.4-0.8 s of a 12 s apt build here: as long as the rest of the pipeline together.
 * So it is renamed aside (one rename, same filesystem) into the store's tmp/, where a crash
 * leaves it for `gc` to sweep, and deleted in the background:
 *  - `wait`: in this process, overlapping the nodes built next; `settle` awaits what is left
 *    (library callers and tests see a clean store when executePlan returns);
 *  - `detach`: by a detached `rm` that may outlive this process, so a one-node build returns as
 *    soon as its layer is published (the CLI's choice).
 */
import { spawn } from 'node:child_process';
import { ownedName } from '../util/owned-name.js';
import { randomBytes } from 'node:crypto';
import { mkdir, rename } from 'node:fs/promises';
import { join } from 'node:path';
import { removeTree } from '../sandbox/state.js';
import type { IdMap } from '../host/subid.js';
import { asSubordinateRoot } from '../host/userns.js';

export type DiscardMode = 'wait' | 'detach';

/**
 * Removes `$1`; where this user cannot (files owned by subordinate ids, rootless), runs the rest
 * of the arguments: the same removal through the user namespace of host/userns.ts.
 */
const DETACHED_RM = 'rm -rf -- "$1" 2>/dev/null || { shift; exec "$@"; }';

export class Discarder {
  private readonly pending = new Set<Promise<void>>();

  constructor(
    private readonly tmpDir: string,
    private readonly mode: DiscardMode,
  ) {}

  /**
   * Moves `upperDir` out of its sandbox into a trash dir of its own (`<trash>/upper`), so the
   * sandbox's teardown finds nothing big to delete. Null when it cannot be moved: then the
   * teardown deletes it as before.
   */
  async moveAside(upperDir: string): Promise<string | null> {
    const trash = join(this.tmpDir, ownedName('trash-', randomBytes(6).toString('hex')));
    try {
      await mkdir(trash, { recursive: true });
      await rename(upperDir, join(trash, 'upper'));
      return trash;
    } catch {
      await removeTree(trash, undefined).catch(() => undefined);
      return null;
    }
  }

  /** Deletes a trash dir from `moveAside` in the background; call once its sandbox is destroyed. */
  remove(trash: string, idMap: IdMap): void {
    if (this.mode === 'detach') {
      // a failed spawn leaves the dir for gc, which sweeps old tmp/ entries
      void asSubordinateRoot(idMap, ['rm', '-rf', '--', trash]).then(
        (fallback) => {
          const child = spawn('/bin/sh', ['-c', DETACHED_RM, 'msb-discard', trash, ...fallback], { detached: true, stdio: 'ignore' });
          child.on('error', () => undefined);
          child.unref();
        },
        () => undefined,
      );
      return;
    }
    const p: Promise<void> = removeTree(trash, idMap)
      .catch(() => undefined)
      .finally(() => this.pending.delete(p));
    this.pending.add(p);
  }

  /** Waits for in-process removals (a no-op for detached ones). */
  async settle(): Promise<void> {
    while (this.pending.size > 0) await Promise.all([...this.pending]);
  }
}
