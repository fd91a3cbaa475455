/**
 * What people moving off Docker type first gets a useful answer (docker-habits.ts): run's Docker
 * flags work or say what to use, a command needs no `--`, a run without one runs the
 * environment's own command, Docker verbs are answered instead of suggesting unrelated
 * commands, and tags have a whole life (`tag`, `rm`).
 */
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { publishedBusybox } from '../../test/helpers/published-busybox.js';
import { type Ran, runCli } from '../../test/helpers/run-cli.js';
import { applyDockerHabits, rewriteRunArgs, typoSuggestion } from './docker-habits.js';

/** The message and hint of what `f` throws, as the CLI prints them. */
function refusal(f: () => unknown): string {
  try {
    f();
  } catch (e) {
    return `${(e as Error).message}: ${(e as { hint?: string }).hint ?? ''}`;
  }
  return 'nothing thrown';
}

describe('run arguments as Docker users write them (pure)', () => {
  it('takes the command after the ref without --, keeps a given --, maps -w and drops --rm', () => {
    expect(rewriteRunArgs('run', ['--rm', '-w', '/tmp', 'demo/x', 'ls', '-la'])).toEqual({
      word: 'run',
      args: ['--workdir', '/tmp', 'demo/x', '--', 'ls', '-la'],
    });
    expect(rewriteRunArgs('run', ['-e', 'A=1', 'demo/x', '--', 'sh', '-c', 'echo $A'])).toEqual({
      word: 'run',
      args: ['-e', 'A=1', 'demo/x', '--', 'sh', '-c', 'echo $A'],
    });
    // an option's value is not taken for the ref
    expect(rewriteRunArgs('run', ['--network', 'host', '--timeout=5s', 'demo/x', 'true'])).toEqual({
      word: 'run',
      args: ['--network', 'host', '--timeout=5s', 'demo/x', '--', 'true'],
    });
    expect(rewriteRunArgs('run', ['demo/x'])).toEqual({ word: 'run', args: ['demo/x'] });
  });

  it('makes -it a shell, refusing what a shell does not take', () => {
    expect(rewriteRunArgs('run', ['-it', '--rm', 'demo/x'])).toEqual({ word: 'shell', args: ['demo/x'] });
    expect(rewriteRunArgs('run', ['-i', '-t', '-e', 'A=1', 'demo/x', 'python3'])).toEqual({ word: 'shell', args: ['-e', 'A=1', 'demo/x', '--', 'python3'] });
    expect(() => rewriteRunArgs('run', ['-it', '--timeout', '5s', 'demo/x'])).toThrow(/an interactive shell does not take --timeout/);
  });

  it('refuses Docker flags that have no equivalent, saying what to use', () => {
    expect(refusal(() => rewriteRunArgs('run', ['-d', 'demo/x', 'sleep', '9']))).toMatch(/^run -d: not a minisandbox option: .*minisandbox serve/);
    expect(refusal(() => rewriteRunArgs('run', ['--name=web', 'demo/x']))).toMatch(/^run --name: .*sandbox id/);
    expect(refusal(() => rewriteRunArgs('run', ['-p', '80:80', 'demo/x']))).toMatch(/^run -p: .*--network host/);
  });

  it('suggests a command only for a typo, never a merely similar one', () => {
    const commands = ['pull', 'ls', 'copy', 'run', 'rm', 'tag'];
    expect(typoSuggestion('pul', commands)).toBe('pull');
    expect(typoSuggestion('lpul', commands)).toBeUndefined();
    expect(typoSuggestion('kill', commands)).toBeUndefined();
    expect(typoSuggestion('ps', commands)).toBeUndefined();
    expect(() => applyDockerHabits(['ps'])).toThrow(/no "ps" command/);
    expect(() => applyDockerHabits(['--json', 'kill'])).toThrow(/no "kill" command/);
    expect(() => applyDockerHabits(['help', 'nosuch'])).toThrow(/unknown command "nosuch"/);
    expect(applyDockerHabits(['help', 'run'])).toEqual(['help', 'run']);
    expect(applyDockerHabits(['--store', 'x', 'run', 'r', 'true'])).toEqual(['--store', 'x', 'run', 'r', '--', 'true']);
  });
});

const TAG = 'habits/busybox';
const { work } = publishedBusybox('ms-docker-habits-', TAG, { cmd: ['/bin/sh', '-c', 'echo from the environment command'] });
const registry = join(work, 'registry');
const cli = (...args: string[]): Promise<Ran> => runCli(['--registry', registry, '--store', join(work, 'store'), ...args]);

describe('the CLI as Docker users type it', () => {
  it('runs a command given without --, in -w, with --rm; a run without one runs the environment command', async () => {
    const r = await cli('run', '--rm', '-w', '/tmp', TAG, 'sh', '-c', 'pwd; ls -d /tmp');
    expect(r.stderr).toBe('');
    expect([r.code, r.stdout]).toEqual([0, '/tmp\n/tmp\n']);
    const own = await cli('run', TAG);
    expect([own.code, own.stdout]).toEqual([0, 'from the environment command\n']);
  });

  it('answers Docker verbs and flags with exit 2 and what to use, never an unrelated suggestion', async () => {
    for (const [args, says] of [
      [['ps'], /no "ps" command: .*serve/],
      [['kill', 'x'], /no "kill" command/],
      [['images'], /minisandbox ls/],
      [['run', '-d', TAG, 'sleep', '5'], /run -d: not a minisandbox option.*serve/s],
      [['pul', TAG], /unknown command "pul".*did you mean `pull`/s],
      [['help', 'nosuch'], /unknown command "nosuch"/],
    ] as const) {
      const r = await cli(...args);
      expect(r.code, args.join(' ')).toBe(2);
      expect(r.stderr, args.join(' ')).toMatch(says);
      expect(r.stderr).not.toMatch(/Did you mean/);
    }
  });

  it('tags an environment under a second name and removes tags, checking every name first', async () => {
    const tagged = await cli('--json', 'tag', TAG, 'habits/second');
    expect(tagged.code, tagged.stderr).toBe(0);
    const { env } = JSON.parse(tagged.stdout) as { env: string };
    expect((await cli('run', 'habits/second', 'true')).code).toBe(0);
    // one unknown name: nothing is removed
    const partly = await cli('rm', 'habits/second', 'habits/nope');
    expect(partly.code).toBe(3);
    expect(partly.stderr).toMatch(/habits\/nope.*nothing was removed/s);
    const listed = JSON.parse((await cli('--json', 'ls')).stdout) as Array<{ ref: string; env: string }>;
    expect(listed.filter((r) => r.env === env).map((r) => r.ref)).toEqual([TAG, 'habits/second']);
    const removed = await cli('rm', 'habits/second');
    expect(removed.code, removed.stderr).toBe(0);
    expect(removed.stdout).toContain(`removed habits/second (${env})`);
    expect((await cli('run', 'habits/second', 'true')).code).toBe(3);
    expect((await cli('run', TAG, 'true')).code).toBe(0);
  });
});
