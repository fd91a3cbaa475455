/**
 * The server's sandboxes run at a lower priority than the server (niceness 10 unless a create
 * gives limits.nice, 0-19; server/sandbox-nice.ts): 128 busy sandboxes at the host's default
 * starved it where processes compete one by one. Every process of the sandbox has it (field 19 of
 * /proc/self/stat, read by `cut` itself), background ones included, and none can lower it.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ServerKit } from '../../test/helpers/server-kit.js';

const kit = new ServerKit();
beforeAll(() => kit.setUp(), 120_000);
afterAll(() => kit.tearDown());

const NICENESS = "cut -d' ' -f19 /proc/self/stat";

describe('sandbox niceness', () => {
  it('is 10 by default, for commands and what they start in the background, and cannot be lowered from inside', async () => {
    const id = await kit.create();
    expect(await kit.sh(id, NICENESS)).toBe('10\n');
    expect(await kit.sh(id, `(${NICENESS} > /tmp/bg) & wait; cat /tmp/bg`)).toBe('10\n');
    // renice -n is relative: lowering it is refused, raising it further works
    expect(await kit.sh(id, `renice -n -1 -p $$ 2>/dev/null || echo refused; renice -n 5 -p $$ >/dev/null && ${NICENESS}`)).toBe('refused\n15\n');
  });

  it("is what a create gives in limits.nice, 0 to 19, a fork child's and a reset's too, and 422 names the field outside that", async () => {
    for (const nice of [0, 19]) {
      const id = await kit.create({ limits: { nice } });
      expect(await kit.sh(id, NICENESS)).toBe(`${nice}\n`);
      const fork = await kit.call('POST', `/v1/sandboxes/${id}/fork`, { count: 1 });
      const [child] = (fork.json() as { children: Array<{ id: string }> }).children;
      expect(await kit.sh(child?.id ?? 'missing', NICENESS)).toBe(`${nice}\n`);
      expect((await kit.call('POST', `/v1/sandboxes/${id}/reset`, {})).status).toBe(200);
      expect(await kit.sh(id, NICENESS)).toBe(`${nice}\n`);
    }
    for (const nice of [-1, 20, 1.5]) {
      const r = await kit.call('POST', '/v1/sandboxes', { ref: 'kit/busybox', limits: { nice } });
      expect([nice, r.status, r.json()]).toMatchObject([nice, 422, { error: { code: 'INVALID_INPUT', field: 'limits.nice' } }]);
    }
  });
});
