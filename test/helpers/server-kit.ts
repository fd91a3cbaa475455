/**
 * A real sandbox server for tests that need an environment with files to delete and a dir to make
 * opaque (snapshot, reset, fork): a ServerFixture over `kit/busybox`, plus `sh` for a command's
 * stdout. Each test file gets its own (one busybox push and one listen):
 * `const kit = new ServerKit(); beforeAll(() => kit.setUp(), 120_000); afterAll(() => kit.tearDown());`
 */
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { RunningServer } from '../../src/server/serve.js';
import { ServerFixture } from './server-fixture.js';

export class ServerKit extends ServerFixture {
  /**
   * Pushes the environment, busybox plus `/data/{keep,gone}.txt` and `/opq/{a,b}.txt` (for
   * whiteouts and opaque dirs), env GREETING=hello, workdir /root, and starts the server.
   */
  override async setUp(): Promise<void> {
    await this.pushBusybox(this.reg, 'kit/busybox', {}, (root) => {
      mkdirSync(join(root, 'data'));
      mkdirSync(join(root, 'opq'));
      for (const [p, t] of [
        ['data/keep.txt', 'keep\n'],
        ['data/gone.txt', 'gone\n'],
        ['opq/a.txt', 'a\n'],
        ['opq/b.txt', 'b\n'],
      ] as const)
        writeFileSync(join(root, p), t);
    });
    this.srv = await this.serve({ maxSandboxes: 32 });
    this.token = readFileSync(join(this.work, 'token'), 'utf8').trim();
  }

  /** Creates a sandbox of `kit/busybox` (or of the body's source) and returns its id. */
  override create(body: Record<string, unknown> = {}, server?: RunningServer): Promise<string> {
    return super.create('snapshot' in body || 'ref' in body ? body : { ref: 'kit/busybox', ...body }, server);
  }

  /**
   * Runs a shell command with exec and returns its stdout. Throws on a failed request and on a
   * command that did not end by itself (not started, killed, timed out): its stdout would be empty
   * and the assertion on it would not say why.
   */
  async sh(id: string, command: string): Promise<string> {
    const r = await this.call('POST', `/v1/sandboxes/${id}/exec`, { command });
    if (r.status !== 200) throw new Error(`exec: ${r.status} ${r.text}`);
    const body = r.json();
    if (body.outcome !== 'ok') throw new Error(`exec ${JSON.stringify(command)} ended ${body.outcome}: ${r.text}`);
    return body.stdout as string;
  }
}
