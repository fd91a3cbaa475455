/**
 * POST /v1/sandboxes/:id/fork {count, session}: every child is a copy of the parent's files at the
 * fork and gets a session with the same id, started in the parent session's cwd with its exported
 * variables (values with quotes, newlines and `$(...)` arrive as bytes, never run); unset ones stay
 * unset. Children are independent of the parent and of each other.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ServerKit } from '../../test/helpers/server-kit.js';

const kit = new ServerKit();
beforeAll(() => kit.setUp(), 120_000);
afterAll(() => kit.tearDown());

describe('fork with a session', () => {
  it('gives each child a session with the parent session cwd and exported variables', async () => {
    const id = await kit.create();
    const ses = (await kit.call('POST', `/v1/sandboxes/${id}/sessions`, {})).json().session as string;
    const run = async (sb: string, sid: string, command: string): Promise<Record<string, unknown>> =>
      (await kit.call('POST', `/v1/sandboxes/${sb}/sessions/${sid}/run`, { command })).json();
    expect(
      await run(
        id,
        ses,
        `mkdir -p "/work/my dir" && cd "/work/my dir" && echo parent > f && export TRICKY='it'"'"'s $(touch /pwned) "q"
line2' && export PLAIN=1 && unset GREETING && NOTEXPORTED=x`,
      ),
    ).toMatchObject({ exit_code: 0 });
    const want = await run(id, ses, 'pwd; echo "[$TRICKY] [$PLAIN] [${GREETING-unset}] [${NOTEXPORTED-unset}]"; cat f');

    const r = await kit.call('POST', `/v1/sandboxes/${id}/fork`, { count: 3, session: ses });
    expect(r.status, r.text).toBe(200);
    const children = r.json().children as Array<{ id: string; session?: string }>;
    expect(children).toHaveLength(3);
    for (const c of children) {
      expect(c.session).toBe(ses);
      expect((await kit.call('GET', `/v1/sandboxes/${c.id}`)).json()).toMatchObject({ forked_from: id, sessions: [ses] });
      // a variable that was never exported is the parent shell's own: not carried over
      expect(await run(c.id, ses, 'pwd; echo "[$TRICKY] [$PLAIN] [${GREETING-unset}] [${NOTEXPORTED-unset}]"; cat f')).toMatchObject({
        stdout: (want.stdout as string).replace('[x]', '[unset]'),
        exit_code: 0,
      });
      expect(await kit.sh(c.id, 'ls /pwned 2>&1 || true')).toContain('No such file');
      await run(c.id, ses, `echo ${c.id} > f`);
    }
    expect(want.stdout).toBe('/work/my dir\n[it\'s $(touch /pwned) "q"\nline2] [1] [unset] [x]\nparent\n');
    // each child's writes are its own
    expect(await kit.sh(children[1]!.id, 'cat "/work/my dir/f"')).toBe(`${children[1]!.id}\n`);
    expect(await kit.sh(id, 'cat "/work/my dir/f"')).toBe('parent\n');

    expect((await kit.call('POST', `/v1/sandboxes/${id}/fork`, { count: 1, session: 'ses-nope' })).status).toBe(404);
    for (const s of [id, ...children.map((c) => c.id)]) expect((await kit.call('DELETE', `/v1/sandboxes/${s}`)).status).toBe(204);
  });

  it('a forked child resets to the forked state', async () => {
    const id = await kit.create();
    await kit.sh(id, 'echo at-fork > /root/f && rm /data/gone.txt');
    const [child] = (await kit.call('POST', `/v1/sandboxes/${id}/fork`, { count: 1 })).json().children as Array<{ id: string }>;
    await kit.sh(child!.id, 'echo later > /root/f; rm /data/keep.txt');
    expect((await kit.call('POST', `/v1/sandboxes/${child!.id}/reset`, {})).status).toBe(200);
    expect(await kit.sh(child!.id, 'cat /root/f; ls /data')).toBe('at-fork\nkeep.txt\n');
    for (const s of [id, child!.id]) expect((await kit.call('DELETE', `/v1/sandboxes/${s}`)).status).toBe(204);
  });
});
