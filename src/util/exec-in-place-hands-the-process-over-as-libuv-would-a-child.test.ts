/**
 * native/exec-in-place.c replaces a node process with another program (the CLI's `run` becomes the
 * launcher this way): same pid, the caller's stdio, and none of what node leaves set that a
 * spawned child would not have (SIGPIPE ignored, a signal mask, close-on-exec stdio), and no
 * pending sample signal of node's CPU profiler. A failed exec throws and node goes on. Where node's headers are
 * missing the addon is not built, and callers are told so.
 */
import { spawn } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import { nativeAddon } from './native.js';

/** Runs `node [flags] -e <js>` with `input` on its stdin; its pid, output and exit. */
function node(
  js: string,
  flags: string[] = [],
  input = '',
): Promise<{ pid: number; code: number | null; signal: string | null; stdout: string; stderr: string }> {
  return new Promise((done, fail) => {
    const child = spawn(process.execPath, [...flags, '-e', js], { stdio: ['pipe', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    child.on('error', fail);
    child.on('close', (code, signal) => done({ pid: child.pid ?? 0, code, signal, stdout, stderr }));
    child.stdin.end(input);
  });
}

const execIn = (addon: string, argv: string[]): string =>
  `const m = { exports: {} }; process.dlopen(m, ${JSON.stringify(addon)}); ` +
  `m.exports.execve(${JSON.stringify(argv[0])}, ${JSON.stringify(argv)}, ['PATH=/usr/bin:/bin']);`;

describe('exec in place', () => {
  it('runs the program in the same process, on the caller stdio, with signals as a spawned child has them, even under the profiler', async () => {
    const addon = await nativeAddon('exec-in-place');
    expect(addon).toBeDefined();
    const script = [
      'echo "pid $$"',
      'read line; echo "stdin $line"',
      'echo "to stderr" >&2',
      // SigIgn and SigBlk are hex masks; bit 12 (0x1000) is SIGPIPE
      'grep -E "^Sig(Ign|Blk):" /proc/self/status',
      // under --cpu-prof node samples itself with SIGPROF: one pending at the exec would end this shell
      'sleep 0.3; echo slept',
    ].join('; ');
    const r = await node(execIn(addon ?? '', ['/bin/sh', '-c', script]), ['--cpu-prof', '--cpu-prof-interval', '50', '--cpu-prof-dir', '/tmp'], 'hello\n');
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toContain(`pid ${r.pid}\n`);
    expect(r.stdout).toContain('stdin hello\n');
    expect(r.stderr).toBe('to stderr\n');
    const mask = (name: string): bigint =>
      BigInt(`0x${/^Sig(?:Ign|Blk):\s*([0-9a-f]+)$/m.exec(r.stdout.split('\n').find((l) => l.startsWith(name)) ?? '')?.[1] ?? 'ffff'}`);
    expect(mask('SigIgn:') & 0x1000n).toBe(0n);
    expect(mask('SigBlk:')).toBe(0n);
    expect(r.stdout.endsWith('slept\n')).toBe(true);
  });

  it('throws where the program cannot be run, and node goes on as it was', async () => {
    const addon = await nativeAddon('exec-in-place');
    const js = `try { ${execIn(addon ?? '', ['/no/such/program'])} } catch (e) { console.log('threw', e.code); } console.log('still node', process.pid);`;
    const r = await node(js);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toBe(`threw ENOENT\nstill node ${r.pid}\n`);
  });

  it('is not built where node has no headers, and the caller is told so', async () => {
    expect(await nativeAddon('exec-in-place', '/nonexistent/include/node')).toBeUndefined();
  });
});
