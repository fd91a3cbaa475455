/**
 * A bounded, seeded fuzz of the server's request schemas against a real `serve`: random argv
 * (empty, NULs, unicode, thousands of elements, megabytes), env (bad names, huge values, hundreds
 * of variables), sizes and durations in every form, sandbox and session ids, bodies that are not
 * JSON or too large, on exec (plain and job), create, sessions and SWE-ReX's execute. Every answer
 * is a success or a 4xx in the server's error shape (SWE-ReX's exceptions as its 511), never a 5xx,
 * and a sentinel sandbox of the same server answers after every batch.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { rng } from '../../test/helpers/rng.js';
import { type Res, ServerFixture } from '../../test/helpers/server-fixture.js';
import { isErrorCode } from '../errors.js';

const fx = new ServerFixture();
let sentinel: string;
let target: string;
let session: string;
beforeAll(async () => {
  await fx.setUp();
  sentinel = await fx.create();
  target = await fx.create();
  const s = await fx.call('POST', `/v1/sandboxes/${target}/sessions`, {});
  session = s.json().session as string;
}, 120_000);
afterAll(() => fx.tearDown());

const BATCHES = 12;
const PER_BATCH = 20;

describe('requests of random argv, env, sizes and names', () => {
  it(`get a success or a 4xx in the server's shape, never a 5xx (${BATCHES * PER_BATCH} requests)`, async () => {
    const r = rng(0x25_fe);
    const int = (n: number) => Math.floor(r() * n);
    const pick = <T>(xs: readonly T[]): T => xs[int(xs.length)]!;
    const chance = (p: number) => r() < p;
    // no letters but those of harmless words, and none of what could background, pipe or substitute in sh
    const safe = ' 0123456789.,-_=+#!?*~%^@\\"\'\né\u00ff😀';
    const text = (max = 20) => Array.from({ length: int(max) }, () => safe[int(safe.length)]).join('');
    const str = (): string => {
      const k = int(12);
      if (k === 0) return '';
      if (k === 1) return `a\0b`;
      if (k === 2) return 'x'.repeat(pick([1000, 100 << 10, (128 << 10) - 1, 128 << 10, 200 << 10]));
      if (k === 3) return '\ud800lone';
      return pick(['echo', 'hi', '-n', '--', '/tmp', 'é', text()]);
    };
    const argv = (): unknown => {
      const k = int(16);
      if (k === 0) return [];
      if (k === 1) return ['/bin/echo', ...Array.from({ length: 600 + int(3000) }, () => 'a')];
      if (k === 2) return ['/bin/echo', ...Array.from({ length: 20 + int(10) }, () => 'y'.repeat(100 << 10))];
      if (k === 3) return pick(['echo', 42, null, { a: 1 }, [1, 2]]);
      return [pick(['/bin/echo', '/bin/true', 'echo', 'false', 'nope', str()]), ...Array.from({ length: int(6) }, str)];
    };
    const command = (): unknown => (chance(0.05) ? pick([42, '', null]) : pick(['true', 'exit 3', `echo ${text()}`, `echo ${text()}`, text(60), str()]));
    const name = () => pick(['V', 'PATH', 'HOME', 'LD_PRELOAD', 'A_1', '', '1A', 'A-B', 'A=B', 'é', 'x'.repeat(200), text(8)]);
    const env = (): unknown => {
      const k = int(12);
      if (k === 0) return pick(['x', 3, [], null]);
      if (k === 1) return Object.fromEntries(Array.from({ length: 300 + int(700) }, (_, i) => [`V${i}`, 'v']));
      if (k === 2) return Object.fromEntries(Array.from({ length: 24 }, (_, i) => [`B${i}`, 'b'.repeat(100 << 10)]));
      return Object.fromEntries(Array.from({ length: int(4) }, () => [name(), chance(0.8) ? str() : pick([1, null, true])]));
    };
    const size = () => pick([1, 0, -5, 1.5, 100, '512m', '1t', '2g', 'lots', '', 1e30, '9'.repeat(30), null]);
    const duration = () => pick([0.2, 2, 0, -1, '30s', '5m', 'soon', '', 1e30, '1.5h', null, true]);
    const id = () => (chance(0.8) ? target : pick(['', 'sb-nope', 'A', 'x'.repeat(70), '..', '%00', 'sb%2Fx']));
    const maybe = <T>(p: number, v: () => T) => (chance(p) ? v() : undefined);
    const body = (fields: Record<string, unknown>) => Object.fromEntries(Object.entries(fields).filter(([, v]) => v !== undefined));
    /** Mostly exactly one of argv and command (the schema's rule), now and then both or neither. */
    const execBody = () => {
      const which = int(20);
      return body({
        argv: which < 10 || which === 18 ? argv() : undefined,
        command: (which >= 10 && which < 18) || which === 18 ? command() : undefined,
        cwd: maybe(0.2, () => pick(['/tmp', '/nope', 'rel', '/a\0b', ''])),
        env: maybe(0.5, env),
        timeout: maybe(0.3, duration),
        max_output: maybe(0.3, size),
        ...(chance(0.03) ? { extra: 1 } : {}),
      });
    };

    const requests: Array<() => Promise<[string, Res]>> = [
      async () => ['exec', await fx.call('POST', `/v1/sandboxes/${id()}/exec`, execBody())],
      async () => ['job', await fx.call('POST', `/v1/sandboxes/${id()}/exec?async=${pick(['true', '1', 'maybe'])}`, execBody())],
      async () => {
        const b = body({
          ref: chance(0.9) ? 'srv/busybox' : str(),
          env: maybe(0.7, env),
          workdir: maybe(0.2, () => pick(['/w', 'w', '/a\0b'])),
          limits: maybe(0.3, () => ({ memory: size(), disk: size(), pids: pick([1, 0, 64, -1, 'x']) })),
          ttl: maybe(0.2, duration),
          network: maybe(0.1, () => pick(['none', 'host', 'all'])),
        });
        const res = await fx.call('POST', '/v1/sandboxes', b);
        if (res.status === 201) await fx.call('DELETE', `/v1/sandboxes/${res.json().id as string}`);
        return ['create', res];
      },
      async () => {
        const res = await fx.call('POST', `/v1/sandboxes/${id()}/sessions`, { startup: chance(0.8) ? [command()] : command() });
        if (res.status === 201) await fx.call('DELETE', `/v1/sandboxes/${target}/sessions/${res.json().session as string}`);
        return ['session', res];
      },
      async () => {
        const sid = chance(0.8) ? session : pick(['', 'nope', 'A B', 'x'.repeat(80)]);
        const b = body({ command: command(), timeout: maybe(0.5, duration), max_output: maybe(0.3, size) });
        return ['session run', await fx.call('POST', `/v1/sandboxes/${id()}/sessions/${encodeURIComponent(sid)}/run`, b)];
      },
      async () => {
        const b = body({
          command: chance(0.5) ? command() : argv(),
          shell: maybe(0.5, () => pick([true, false, 'yes'])),
          env: maybe(0.5, env),
          timeout: maybe(0.3, () => pick([1, 0.5, -1, 'x', null])),
          check: maybe(0.2, () => pick([true, false])),
          cwd: maybe(0.2, () => pick(['/tmp', '/nope', null])),
        });
        return ['swerex execute', await fx.call('POST', `/swerex/${id()}/execute`, b)];
      },
      async () => {
        const raw = pick(['{', '[]', 'null', '"x"', '{"argv": ["a"', '\u0000', 'x'.repeat(9 << 20)]);
        return ['raw', await fx.call('POST', `/v1/sandboxes/${id()}/exec`, undefined, { raw, headers: { 'content-type': 'application/json' } })];
      },
    ];

    for (let batch = 0; batch < BATCHES; batch++) {
      for (let i = 0; i < PER_BATCH; i++) {
        // the raw bodies (one of them 9 MiB) are the rarest
        const [what, res] = await (chance(0.03) ? requests[6]! : pick(requests.slice(0, 6)))();
        const where = `${what} answered ${res.status}: ${res.text.slice(0, 300)}`;
        if (res.status === 511 && what === 'swerex execute') {
          expect(typeof (res.json().swerexception as { class_path?: unknown } | undefined)?.class_path, where).toBe('string');
          continue;
        }
        expect(res.status, where).toBeLessThan(500);
        if (res.status >= 400) {
          const e = res.json().error as { code?: unknown; message?: unknown } | undefined;
          expect(isErrorCode(e?.code) && typeof e?.message === 'string', where).toBe(true);
        }
      }
      const alive = await fx.call('POST', `/v1/sandboxes/${sentinel}/exec`, { command: 'echo alive' });
      expect(alive.json()).toMatchObject({ outcome: 'ok', stdout: 'alive\n' });
    }
  });
});
