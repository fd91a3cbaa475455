/**
 * One request's field count cannot reach another sandbox: an exec with 601 argv elements, or an
 * env of 300 variables (through exec, through create, or both), runs in its own sandbox like any
 * command within the kernel's limits, and a sentinel sandbox of the same server answers exec
 * before, between and after. The launcher server used to take at most 546 fields a request and
 * exit on more, ending every sandbox it held (they die with it). Real HTTP, real sandboxes.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ServerFixture } from '../../test/helpers/server-fixture.js';

const fx = new ServerFixture();
beforeAll(() => fx.setUp(), 120_000);
afterAll(() => fx.tearDown());

const vars = (n: number, prefix = 'V'): Record<string, string> => Object.fromEntries(Array.from({ length: n }, (_, i) => [`${prefix}${i}`, `value-${i}`]));

async function exec(id: string, body: Record<string, unknown>): Promise<Record<string, unknown>> {
  const r = await fx.call('POST', `/v1/sandboxes/${id}/exec`, body);
  expect(r.status, r.text).toBe(200);
  return r.json();
}

describe('an exec of many fields', () => {
  it('runs with 601 argv elements or 300 variables, and the other sandbox of the server keeps answering', async () => {
    const sentinel = await fx.create();
    const other = await fx.create();
    const alive = async (): Promise<void> => expect(await exec(sentinel, { command: 'echo alive' })).toMatchObject({ outcome: 'ok', stdout: 'alive\n' });
    await alive();

    const argv = ['/bin/sh', '-c', 'echo "$# ${597}"', 'sh', ...Array.from({ length: 597 }, (_, i) => `a${i + 1}`)];
    expect(argv).toHaveLength(601);
    expect(await exec(other, { argv })).toMatchObject({ outcome: 'ok', exit_code: 0, stdout: '597 a597\n' });
    await alive();

    expect(await exec(other, { command: 'echo "$V0 $V299"', env: vars(300) })).toMatchObject({ outcome: 'ok', stdout: 'value-0 value-299\n' });
    await alive();

    // the sandbox's own 300 variables (create's env, as an image's Env would be) and 300 more of the exec's
    const many = await fx.create({ ref: 'srv/busybox', env: vars(300, 'C') });
    expect(await exec(many, { command: 'echo "$C299 $V299 $GREETING"', env: vars(300) })).toMatchObject({
      outcome: 'ok',
      stdout: 'value-299 value-299 hello\n',
    });
    await alive();
    for (const id of [sentinel, other, many]) expect((await fx.call('DELETE', `/v1/sandboxes/${id}`)).status).toBe(204);
  });
});
