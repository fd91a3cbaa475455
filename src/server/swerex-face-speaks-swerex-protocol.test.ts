/**
 * The SWE-ReX face (`/swerex/<key>/...`) over real HTTP, against real sandboxes of a busybox
 * environment: the field names and defaults of SWE-ReX's models, its bash-session behaviour, its
 * 511 exceptions with their class paths, uploads, X-Request-ID replays and `inst:` keys.
 */
import { execFileSync } from 'node:child_process';
import { chmodSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { eventually } from '../../test/helpers/eventually.js';
import { observation, SwerexClient } from '../../test/helpers/swerex-client.js';
import { addHostPrograms } from '../../test/helpers/host-programs.js';
import { sleepMarker, sleepRuns } from '../../test/helpers/sleep-marker.js';
import { populateBusyboxRoot } from '../recipe/base-rootfs.js';
import { LocalRegistry } from '../registry/local.js';
import { StorePaths } from '../store/paths.js';
import { pushTree } from '../publish/push.js';
import { type RunningServer, startServer } from './serve.js';

const work = mkdtempSync(join(tmpdir(), 'ms-swerex-'));
chmodSync(work, 0o755); // the sandbox's subordinate ids must reach the store below it
const reg = new LocalRegistry(join(work, 'registry'));
const store = new StorePaths(join(work, 'store'));
let srv: RunningServer;
let token: string;

beforeAll(async () => {
  const root = join(work, 'rootfs');
  await populateBusyboxRoot('/bin/busybox', root);
  const push = new StorePaths(join(work, 'push'));
  await pushTree(reg, push, root, { tag: 'swx/no-bash', config: { workdir: '/root' } });
  // SWE-ReX's sessions run bash: the host's, in the busybox root
  addHostPrograms(root, ['/bin/bash']);
  for (const tag of ['swx/inst-1', 'swx/inst-2', 'swx/busybox']) await pushTree(reg, push, root, { tag, config: { workdir: '/root' } });
  srv = await startServer(
    reg,
    store,
    { listen: { host: '127.0.0.1', port: 0 }, tokenFile: join(work, 'token'), maxSandboxes: 8, idleTimeoutMs: 600_000, ttlMs: 3_600_000 },
    () => undefined,
  );
  token = readFileSync(join(work, 'token'), 'utf8').trim();
}, 120_000);
afterAll(async () => {
  await srv.close();
  rmSync(work, { recursive: true, force: true });
});

const client = new SwerexClient(
  () => srv.url,
  () => token,
);
const rex = client.rex.bind(client);
const ok = client.ok.bind(client);
const raises = client.raises.bind(client);

describe('the SWE-ReX face', () => {
  it('runs a bash session as SWE-ReX does: exit codes, merged output without ANSI, syntax check, ' +
    'timeout that keeps the session, interrupt, check', async () => {
    const key = 'inst:swx:inst-1';
    // is_alive answers for the server, and makes no sandbox
    expect(await ok(key, 'is_alive')).toEqual({ is_alive: true, message: '' });
    expect(srv.manager.named(key)).toBeUndefined();
    const live = srv.manager.live;

    // SWE-ReX answers what came before its first prompt: here its PS1 from the start (no rc file sets one)
    expect(await ok(key, 'create_session', { startup_source: ['/root/.bashrc'] })).toEqual({ output: '', session_type: 'bash' });
    expect(srv.manager.named(key)).toBeDefined();
    expect(srv.manager.live).toBe(live + 1);
    await raises(key, 'create_session', {}, 'swerex.exceptions.SessionExistsError');

    expect(
      await ok(key, 'run_in_session', { command: 'mkdir -p /w && cd /w && export FOO=bar && echo hi; echo err >&2; sleep 0.1; echo out', check: 'silent' }),
    ).toEqual(observation('hi\nerr\nout\n', 0));
    // cwd and exported variables stay; the default check is `raise`
    expect(await ok(key, 'run_in_session', { command: 'echo "$FOO $(pwd)"' })).toEqual(observation('bar /w\n', 0));
    // on a terminal LF is CRLF: a CR the command printed stays, as in SWE-ReX
    expect(await ok(key, 'run_in_session', { command: "printf '\\033[1;31mred\\033[0m\\r\\n'" })).toEqual(observation('red\r\n', 0));
    expect(await ok(key, 'run_in_session', { command: '(exit 3)', check: 'silent' })).toMatchObject({ exit_code: 3 });
    expect(await ok(key, 'run_in_session', { command: 'false', check: 'ignore' })).toEqual(observation('', null));

    const failed = await raises(key, 'run_in_session', { command: 'echo no; false', error_msg: 'step failed' }, 'swerex.exceptions.NonZeroExitCodeError');
    expect(failed.message).toBe("step failed: Command 'echo no; false' failed with exit code 1. Here is the output:\n'no\\n'");

    const syntax = await raises(key, 'run_in_session', { command: 'if then fi (' }, 'swerex.exceptions.BashIncorrectSyntaxError');
    const said = "bash: line 1: syntax error near unexpected token `then'\nbash: line 1: `if then fi ('\n";
    expect(syntax.message).toBe(`Error (exit code 2) while checking bash command \n'if then fi ('\n---- Stderr ----\n${said}\n---- Stdout ----\n`);
    expect(syntax.extra_info).toEqual({ bash_stdout: '', bash_stderr: said });

    const timedOut = await raises(key, 'run_in_session', { command: 'sleep 30', timeout: 0.5 }, 'swerex.exceptions.CommandTimeoutError');
    expect(timedOut.message).toBe("timeout after 0.5 seconds while running command 'sleep 30'");
    // the session is still there, in its cwd, with its variables
    expect(await ok(key, 'run_in_session', { command: 'echo "$FOO $(pwd)"' })).toEqual(observation('bar /w\n', 0));

    // an interrupt action while a command runs: Ctrl-C to it; both requests answer, the shell stays
    const marker = sleepMarker();
    const long = rex(key, 'run_in_session', { command: `sleep ${marker}`, check: 'silent' });
    await eventually(() => sleepRuns(marker));
    expect(await ok(key, 'run_in_session', { action_type: 'bash_interrupt', session: 'default', timeout: 1 })).toEqual(observation('', 0));
    const interrupted = await long;
    expect(interrupted.status, interrupted.text).toBe(200);
    expect(interrupted.body).toMatchObject({ exit_code: 130 });
    expect(sleepRuns(marker)).toBe(false);
    expect(await ok(key, 'run_in_session', { command: 'echo "$FOO $(pwd)"' })).toEqual(observation('bar /w\n', 0));
    // an interrupt with nothing running: Ctrl-C at the prompt, which readline echoes
    expect(await ok(key, 'run_in_session', { action_type: 'bash_interrupt' })).toEqual(observation('^C', 0));

    // sessions by name
    expect(await ok(key, 'create_session', { session: 'second' })).toEqual({ output: '', session_type: 'bash' });
    expect(await ok(key, 'run_in_session', { command: 'pwd', session: 'second' })).toEqual(observation('/root\n', 0));
    expect(await ok(key, 'close_session', { session: 'second' })).toEqual({ session_type: 'bash' });
    const gone = await raises(key, 'run_in_session', { command: 'pwd', session: 'second' }, 'swerex.exceptions.SessionDoesNotExistError');
    expect(gone.message).toBe("session 'second' does not exist");
    await raises(key, 'close_session', { session: 'second' }, 'swerex.exceptions.SessionDoesNotExistError');

    // the shell itself ended: no exit code to give
    await raises(key, 'run_in_session', { command: 'exit 0' }, 'swerex.exceptions.NoExitCodeError');
    expect(await ok(key, 'run_in_session', { command: 'echo again' })).toEqual(observation('again\n', 0));

    // close destroys an inst: key's sandbox; is_alive still answers for the server
    const id = srv.manager.named(key)!.sb.id;
    expect(await ok(key, 'close')).toEqual({});
    expect(srv.manager.named(key)).toBeUndefined();
    expect(srv.manager.list().map((s) => s.id)).not.toContain(id);
    expect(readdirSync(store.sandboxesDir)).not.toContain(id);
    expect(await ok(key, 'is_alive')).toEqual({ is_alive: true, message: '' });
    await raises(key, 'run_in_session', { command: 'true' }, 'swerex.exceptions.SessionDoesNotExistError');
  }, 180_000);

  it('executes commands, reads and writes files, and takes uploads of files and zipped directories', async () => {
    const key = 'inst:swx:inst-2';
    // concurrent first uses of an inst: key make one sandbox
    const live = srv.manager.live;
    const firsts = await Promise.all(['a', 'b', 'c'].map((session) => rex(key, 'create_session', { session })));
    expect(firsts.map((r) => r.status)).toEqual([200, 200, 200]);
    expect(srv.manager.live).toBe(live + 1);

    expect(await ok(key, 'execute', { command: ['sh', '-c', 'echo out; echo err >&2; exit 3'] })).toEqual({ stdout: 'out\n', stderr: 'err\n', exit_code: 3 });
    expect(await ok(key, 'execute', { command: 'echo "$0 $V" && pwd', shell: true, env: { V: 'v' }, cwd: '/tmp' })).toEqual({
      stdout: '/bin/sh v\n/tmp\n',
      stderr: '',
      exit_code: 0,
    });
    expect(await ok(key, 'execute', { command: 'echo a; echo b >&2', shell: true, merge_output_streams: true })).toEqual({
      stdout: 'a\nb\n',
      stderr: '',
      exit_code: 0,
    });
    const nz = await raises(key, 'execute', { command: 'exit 4', shell: true, check: true }, 'swerex.exceptions.NonZeroExitCodeError');
    expect(nz.message).toBe("Command 'exit 4' failed with exit code 4. Stdout:\n''\nStderr:\n''");
    const slow = await raises(key, 'execute', { command: ['sleep', '30'], timeout: 0.5 }, 'swerex.exceptions.CommandTimeoutError');
    expect(slow.message).toBe('Timeout (0.5s) exceeded while running command');
    const missingProgram = await raises(key, 'execute', { command: ['no-such-program'] }, 'builtins.FileNotFoundError');
    expect(missingProgram.message).toBe("[Errno 2] No such file or directory: 'no-such-program'");

    expect(await ok(key, 'write_file', { path: '/work/deep/a.txt', content: 'x\r\ny\n' })).toEqual({});
    // read as Python's read_text does: universal newlines
    expect(await ok(key, 'read_file', { path: '/work/deep/a.txt' })).toEqual({ content: 'x\ny\n' });
    const missing = await raises(key, 'read_file', { path: '/nope.txt' }, 'builtins.FileNotFoundError');
    expect(missing.message).toBe("[Errno 2] No such file or directory: '/nope.txt'");
    await raises(key, 'read_file', { path: '/work' }, 'builtins.IsADirectoryError');

    // one file, as SWE-ReX's client sends it: file first, then target_path and unzip
    const single = new FormData();
    single.append('file', new Blob([Buffer.from('#!/bin/sh\necho uploaded\n')]), 'run.sh');
    single.append('target_path', '/opt/one/run.sh');
    single.append('unzip', 'false');
    const up = await rex(key, 'upload', undefined, { form: single });
    expect([up.status, up.body]).toEqual([200, {}]);
    expect(await ok(key, 'read_file', { path: '/opt/one/run.sh' })).toEqual({ content: '#!/bin/sh\necho uploaded\n' });

    // a directory arrives zipped (SWE-ReX's client zips it with shutil.make_archive)
    const dir = join(work, 'tools');
    mkdirSync(join(dir, 'bin'), { recursive: true });
    writeFileSync(join(dir, 'bin', 'tool'), '#!/bin/sh\necho tool ran\n', { mode: 0o755 });
    writeFileSync(join(dir, 'README'), 'docs\n');
    const zipFile = join(work, 'tools.zip');
    execFileSync('python3', ['-c', 'import shutil,sys; shutil.make_archive(sys.argv[1], "zip", sys.argv[2])', zipFile.replace(/\.zip$/, ''), dir]);
    const zipped = new FormData();
    zipped.append('file', new Blob([readFileSync(zipFile)]), 'zipped_transfer.zip');
    zipped.append('target_path', '/opt/tools');
    zipped.append('unzip', 'true');
    const upDir = await rex(key, 'upload', undefined, { form: zipped });
    expect([upDir.status, upDir.body], upDir.text).toEqual([200, {}]);
    expect(await ok(key, 'execute', { command: '/opt/tools/bin/tool && cat /opt/tools/README', shell: true })).toEqual({
      stdout: 'tool ran\ndocs\n',
      stderr: '',
      exit_code: 0,
    });

    // a zip with an entry that would leave the target is refused, and nothing of it is written
    for (const [i, evil] of ['../escape.txt', '/abs.txt'].entries()) {
      const hostile = join(work, `hostile-${i}.zip`);
      execFileSync('python3', [
        '-c',
        'import zipfile,sys\nwith zipfile.ZipFile(sys.argv[1], "w") as z:\n  z.writestr("ok.txt", "fine")\n  z.writestr(zipfile.ZipInfo(sys.argv[2]), "bad")',
        hostile,
        evil,
      ]);
      const bad = new FormData();
      bad.append('file', new Blob([readFileSync(hostile)]), 'zipped_transfer.zip');
      bad.append('target_path', '/opt/hostile/inner');
      bad.append('unzip', 'true');
      const refused = await rex(key, 'upload', undefined, { form: bad });
      expect(refused.status, refused.text).toBe(511);
      expect(refused.body.swerexception).toMatchObject({ class_path: 'builtins.ValueError', message: expect.stringContaining(evil) });
    }
    expect(
      await ok(key, 'execute', {
        command: 'for f in /opt/hostile/escape.txt /opt/hostile/inner/ok.txt /abs.txt; do test ! -e $f || echo $f; done',
        shell: true,
      }),
    ).toEqual({ stdout: '', stderr: '', exit_code: 0 });

    expect(await ok(key, 'close')).toEqual({});
    expect(srv.manager.named(key)).toBeUndefined();
  }, 180_000);

  it('answers a retried POST with the same X-Request-ID once, also while the first is still running', async () => {
    const created = await fetch(`${srv.url}/v1/sandboxes`, {
      method: 'POST',
      headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
      body: JSON.stringify({ ref: 'swx/busybox' }),
    });
    expect(created.status).toBe(201);
    const id = ((await created.json()) as { id: string }).id;
    expect(await ok(id, 'is_alive')).toEqual({ is_alive: true, message: '' });
    expect(await ok(id, 'create_session', {})).toEqual({ output: '', session_type: 'bash' });
    const append = { command: 'echo x >> /tmp/count; wc -l < /tmp/count' };
    const first = await ok(id, 'run_in_session', append, { 'x-request-id': 'rid-1' });
    expect(first).toEqual(observation('1\n', 0));
    expect(await ok(id, 'run_in_session', append, { 'x-request-id': 'rid-1' })).toEqual(first);
    // the retry arrives while the first still runs: it waits for that answer
    const slowAppend = { command: 'sleep 1; echo x >> /tmp/count; wc -l < /tmp/count' };
    const both = await Promise.all([
      ok(id, 'run_in_session', slowAppend, { 'x-request-id': 'rid-2' }),
      ok(id, 'run_in_session', slowAppend, { 'x-request-id': 'rid-2' }),
    ]);
    expect(both).toEqual([observation('2\n', 0), observation('2\n', 0)]);
    // an error is replayed too
    const failing = { command: 'echo x >> /tmp/count; false' };
    for (let i = 0; i < 2; i++) {
      const r = await rex(id, 'run_in_session', failing, { headers: { 'x-request-id': 'rid-3' } });
      expect(r.status).toBe(511);
    }
    expect(await ok(id, 'read_file', { path: '/tmp/count' })).toEqual({ content: 'x\nx\nx\n' });
    // a new id runs again
    expect(await ok(id, 'run_in_session', append, { 'x-request-id': 'rid-4' })).toEqual(observation('4\n', 0));

    // close on a sandbox-id key ends its SWE-ReX sessions; the sandbox is its creator's to delete
    expect(await ok(id, 'close')).toEqual({});
    await raises(id, 'run_in_session', { command: 'true' }, 'swerex.exceptions.SessionDoesNotExistError');
    expect(srv.manager.get(id).sb.alive).toBe(true);
    await srv.manager.destroy(id);
    expect(await ok(id, 'is_alive')).toMatchObject({ is_alive: false });
  }, 120_000);

  it('refuses a wrong key (401) and answers errors that are not SWE-ReX exceptions as JSON', async () => {
    const key = 'inst:swx:inst-1';
    const live = srv.manager.live;
    for (const [route, body] of [
      ['is_alive', undefined],
      ['create_session', {}],
      ['execute', { command: 'true', shell: true }],
    ] as const) {
      const r = await rex(key, route, body, { headers: { 'x-api-key': 'wrong-token-wrong-token' } });
      expect([r.status, r.body]).toMatchObject([401, { error: { code: 'UNAUTHORIZED' } }]);
    }
    const noKey = await fetch(`${srv.url}/swerex/${key}/is_alive`);
    expect(noKey.status).toBe(401);
    expect(srv.manager.live).toBe(live);
    expect(srv.manager.named(key)).toBeUndefined();
    // Bearer works as well as X-API-Key
    const bearer = await fetch(`${srv.url}/swerex/${key}/is_alive`, { headers: { authorization: `Bearer ${token}` } });
    expect(bearer.status).toBe(200);

    const unknownSandbox = await rex('sb-nope', 'create_session', {});
    expect([unknownSandbox.status, unknownSandbox.body]).toMatchObject([404, { error: { code: 'NOT_FOUND' } }]);
    const badBody = await rex('sb-nope', 'run_in_session', { command: 5 });
    expect([badBody.status, badBody.body]).toMatchObject([422, { error: { code: 'INVALID_INPUT', field: 'command' } }]);
    const badKey = await rex('inst:only-one-part', 'create_session', {});
    expect([badKey.status, badKey.body]).toMatchObject([422, { error: { field: 'key' } }]);
    const notMultipart = await rex(key, 'upload', { target_path: '/x' });
    expect(notMultipart.status).toBe(422);
    expect(srv.manager.named(key)).toBeUndefined();
    // SWE-ReX's sessions run bash: in an environment without one that is its EOF, said plainly
    const noBash = await raises('inst:swx:no-bash', 'create_session', {}, 'pexpect.exceptions.EOF');
    expect(noBash.message).toBe('the environment has no bash: SWE-ReX sessions run bash');
    expect(await ok('inst:swx:no-bash', 'close')).toEqual({});
  }, 60_000);
});
