/**
 * `run`/`shell` take host paths as Docker users write them: `--mount type=bind,source=,target=
 * [,readonly]` and `-v HOST:PATH[:ro|:rw]`, with or without `--` and among Docker's other flags;
 * bad values stop the command with exit 2 and what to write, before anything is pulled.
 */
import { chownSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { publishedBusybox } from '../../test/helpers/published-busybox.js';
import { type Ran, runCli } from '../../test/helpers/run-cli.js';
import { rewriteRunArgs } from './docker-habits.js';
import { parseMount, parseVolume } from './mount-options.js';

describe('--mount and -v values (pure)', () => {
  it('reads Docker spellings, relative host paths from the current dir, and leaves access unset unless given', () => {
    expect(parseMount('type=bind,source=/a,target=/b,readonly')).toEqual({ source: '/a', target: '/b', readonly: true });
    expect(parseMount('type=bind,src=data,dst=/b,ro=false', '/w')).toEqual({ source: '/w/data', target: '/b', readonly: false });
    expect(parseMount('source=/a,destination=/b')).toEqual({ source: '/a', target: '/b' });
    expect(parseVolume('./x:/y:ro', '/w')).toEqual({ source: '/w/x', target: '/y', readonly: true });
    expect(parseVolume('/x:/y:rw')).toEqual({ source: '/x', target: '/y', readonly: false });
    expect(parseVolume('/x:/y')).toEqual({ source: '/x', target: '/y' });
  });

  it('refuses what it cannot honour, saying what to write', () => {
    expect(() => parseMount('type=volume,source=v,target=/b')).toThrow(/only type=bind/);
    expect(() => parseMount('type=bind,target=/b')).toThrow(/needs source=HOST and target=PATH/);
    expect(() => parseMount('type=bind,source=/a,target=/b,bind-propagation=shared')).toThrow(/unknown field "bind-propagation"/);
    expect(() => parseMount('type=bind,source=/a,target=/b,readonly=maybe')).toThrow(/readonly=true or readonly=false/);
    expect(() => parseVolume('cache:/b')).toThrow(/named volume/);
    expect(() => parseVolume('/a:/b:z')).toThrow(/only ro and rw/);
    expect(() => parseVolume('/a')).toThrow(/HOST:PATH/);
  });

  it('takes -v and --mount values as values, not as the ref', () => {
    expect(rewriteRunArgs('run', ['-v', '/a:/b', '--mount', 'type=bind,source=/c,target=/d', 'demo/x', 'ls'])).toEqual({
      word: 'run',
      args: ['-v', '/a:/b', '--mount', 'type=bind,source=/c,target=/d', 'demo/x', '--', 'ls'],
    });
    expect(rewriteRunArgs('run', ['-it', '-v', '/a:/b', 'demo/x'])).toEqual({ word: 'shell', args: ['-v', '/a:/b', 'demo/x'] });
  });
});

const TAG = 'mounts/busybox';
const { work } = publishedBusybox('ms-run-mounts-', TAG);
const registry = join(work, 'registry');
const cli = (...args: string[]): Promise<Ran> => runCli(['--registry', registry, '--store', join(work, 'store'), ...args]);

describe('run with host paths', () => {
  it('mounts -v and --mount, read-only where asked or not the caller own, writes rw ones through', async () => {
    const tools = join(work, 'tools');
    const out = join(work, 'out');
    const others = join(work, 'others');
    for (const d of [tools, out, others]) mkdirSync(d, { recursive: true });
    writeFileSync(join(tools, 'tool.sh'), 'echo tool ran\n');
    writeFileSync(join(others, 'theirs'), 'not yours\n');
    chownSync(others, 4242, 4242);
    const r = await cli(
      'run',
      '--rm',
      '-v',
      `${tools}:/opt/tools:ro`,
      '--mount',
      `type=bind,source=${out},target=/out`,
      '-v',
      `${others}:/others`,
      TAG,
      'sh',
      '-c',
      'sh /opt/tools/tool.sh; echo done > /out/result; touch /opt/tools/x 2>/dev/null || echo tools-ro; ' +
        'touch /others/x 2>/dev/null || echo others-ro; cat /others/theirs',
    );
    expect(r.stderr).toBe('');
    expect([r.code, r.stdout]).toEqual([0, 'tool ran\ntools-ro\nothers-ro\nnot yours\n']);
    expect(readFileSync(join(out, 'result'), 'utf8')).toBe('done\n');
    expect(readdirSync(tools)).toEqual(['tool.sh']);
    expect(readdirSync(others)).toEqual(['theirs']);
  });

  it('stops with exit 2 and what to write for a bad value or target, before starting anything', async () => {
    for (const [args, says] of [
      [['-v', 'cache:/data'], /named volume/],
      [['--mount', 'type=tmpfs,target=/t'], /only type=bind/],
      [['-v', `${work}:/data/../etc`], /"\.\." components are refused/],
      [['-v', `${work}/nope:/data`], /mount source .*nope: ENOENT/],
    ] as const) {
      const r = await cli('run', ...args, TAG, 'true');
      expect(r.code, `${args.join(' ')}: ${r.stderr}`).toBe(2);
      expect(r.stderr).toMatch(says);
    }
  });
});
