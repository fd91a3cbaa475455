/**
 * arg-max.ts' limit is the kernel's, tried on the kernel itself: at this process's stack limit
 * and at a 1 MiB one, an exec of exactly the room the check allows runs, and one of the computed
 * limit itself (the program's path then pushes it over) is refused with E2BIG; each string may
 * have MAX_ARG_STRLEN bytes with its NUL and not one more. Real execs of /bin/true.
 */
import { spawnSync } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import { argMax, checkExecFits, EXEC_RESERVE, execStringsLimit, MAX_ARG_STRLEN, stackSoftLimit, stringsBytes } from './arg-max.js';

/** Fillers that, after `head`, make argv take exactly `bytes` (each string with its NUL and pointer). */
function argvOf(head: string[], bytes: number): string[] {
  const argv = [...head];
  let left = bytes - stringsBytes(head);
  const piece = MAX_ARG_STRLEN - 8;
  while (left > piece + 9) {
    argv.push('x'.repeat(piece - 9));
    left -= piece;
  }
  argv.push('y'.repeat(left - 9));
  return argv;
}

/** Runs /bin/true with `args` and no environment under a stack soft limit of `stackKiB`: exit status, or the E2BIG that refused it. */
function runTrue(stackKiB: number, args: string[]): number | string {
  // sh is exec'd under ours (args fit there), sets the smaller stack limit and execs true with them
  const r = spawnSync('/bin/sh', ['-c', `ulimit -S -s ${stackKiB} && exec /bin/true "$@"`, 'sh', ...args], { env: {}, encoding: 'utf8' });
  if (r.error !== undefined) return (r.error as NodeJS.ErrnoException).code ?? 'error';
  return /Argument list too long/.test(r.stderr) ? 'E2BIG' : (r.status ?? -1);
}

describe('the exec limit', () => {
  it("reads this process's stack limit as the kernel does", () => {
    expect(stackSoftLimit('Limit  Soft Limit  Hard Limit  Units\nMax stack size            8388608              unlimited            bytes\n')).toBe(8 << 20);
    expect(stackSoftLimit('Max stack size            unlimited            unlimited            bytes\n')).toBe('unlimited');
    expect(execStringsLimit(8 << 20)).toBe(2 << 20);
    expect(execStringsLimit('unlimited')).toBe(6 << 20);
    expect(execStringsLimit(64 << 10)).toBe(128 << 10);
    expect(argMax()).toBe(execStringsLimit(stackSoftLimit() ?? 0));
  });

  for (const stackKiB of [1024, Math.floor(Number(stackSoftLimit()) / 1024)]) {
    it(`at a ${stackKiB} KiB stack: the room it allows runs, its limit itself does not`, () => {
      const limit = execStringsLimit(stackKiB << 10);
      // /bin/true's own argv[0] is the first string of the exec
      const fits = argvOf(['/bin/true'], limit - EXEC_RESERVE).slice(1);
      expect(() => checkExecFits(['/bin/true', ...fits], {}, undefined, limit)).not.toThrow();
      expect(runTrue(stackKiB, fits)).toBe(0);
      const over = argvOf(['/bin/true'], limit).slice(1);
      expect(() => checkExecFits(['/bin/true', ...over], {}, undefined, limit)).toThrow(/ARG_MAX/);
      expect(runTrue(stackKiB, over)).toBe('E2BIG');
    });
  }

  it('takes a string of MAX_ARG_STRLEN bytes with its NUL, and refuses one more', () => {
    const most = 'a'.repeat(MAX_ARG_STRLEN - 1);
    expect(() => checkExecFits(['/bin/true', most], {})).not.toThrow();
    expect(runTrue(8192, [most])).toBe(0);
    expect(() => checkExecFits(['/bin/true', `${most}a`], {})).toThrow(/MAX_ARG_STRLEN/);
    expect(runTrue(8192, [`${most}a`])).toBe('E2BIG');
    expect(() => checkExecFits(['/bin/true'], { V: most.slice(2) })).not.toThrow();
    expect(() => checkExecFits(['/bin/true'], { V: most.slice(1) })).toThrow(/env\.V/);
  });
});
