/** Host git, isolated from the machine's global and system config so results do not vary by machine. */

export interface GitResult {
  /** undefined when git could not be started at all. */
  exitCode: number | undefined;
  stdout: string;
  stderr: string;
  /** What went wrong, in one line, when it did. */
  message: string;
}

/** Runs git without throwing on a failure exit; `input` is its stdin. */
export async function runGit(args: string[], opts: { cwd?: string; input?: string } = {}): Promise<GitResult> {
  // Loaded on first use: execa costs ~160 ms of every CLI start, and most commands never run git.
  const { execa } = await import('execa');
  const r = await execa('git', args, {
    cwd: opts.cwd,
    env: { GIT_CONFIG_NOSYSTEM: '1', GIT_CONFIG_GLOBAL: '/dev/null', GIT_TERMINAL_PROMPT: '0', LC_ALL: 'C' },
    ...(opts.input === undefined ? { stdin: 'ignore' as const } : { input: opts.input }),
    reject: false,
  });
  return { exitCode: r.exitCode, stdout: String(r.stdout), stderr: String(r.stderr), message: r.shortMessage ?? '' };
}
