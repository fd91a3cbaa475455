/**
 * One tenant floods a real `serve` with hostile and oversized requests (test/helpers/flood.ts:
 * execs printing past the largest max_output, /dev/zero reads, zips that inflate to 240 MiB,
 * JSON bodies near and past 8 MiB, a max_output past the ceiling) while another tenant's
 * sandboxes keep running commands: every command of the quiet tenant succeeds with its whole
 * output, every hostile request gets an answer of the server's (none kills it), and the server's
 * peak memory stays within a bound over its warm size. (Tenants here are sandboxes and clients of
 * one token: the server has no other notion of one.)
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { flood, victim, zipBomb } from '../../test/helpers/flood.js';
import { ServerFixture } from '../../test/helpers/server-fixture.js';
import { ServeProcess } from '../../test/helpers/serve-process.js';

const MiB = 1 << 20;
const BUDGET = 64 * MiB;
/** As in oversized-outputs-files-and-zips-keep-the-servers-memory-bounded.test.ts: a few copies of the budget. */
const ALLOWANCE = 4 * BUDGET;

const fx = new ServerFixture();
let zip: Buffer;
beforeAll(async () => {
  await fx.pushBusybox(fx.reg, 'load/busybox');
  const file = join(fx.work, 'bomb.zip');
  zipBomb(file, 240);
  zip = readFileSync(file);
}, 120_000);
afterAll(() => fx.tearDown());

it("leaves the quiet tenant's commands whole while the other floods, within a bound on the server's memory", async () => {
  const srv = await ServeProcess.start(fx, ['--memory-budget', '64m', '--max-output', '32m']);
  try {
    const hostile = await Promise.all(Array.from({ length: 3 }, () => srv.create('load/busybox')));
    const quiet = await Promise.all(Array.from({ length: 3 }, () => srv.create('load/busybox')));
    const target = { url: srv.url, token: srv.token };
    // warm: both tenants' kinds of request once, before the peak so far is taken as the server's working size
    let warmed = false;
    await victim(target, quiet, () => warmed || !(warmed = true));
    const warm = srv.peakRss();

    let flooding = true;
    const victimRun = victim(target, quiet, () => !flooding);
    const tally = await flood(
      target,
      hostile,
      { execBytes: 64 * MiB, maxOutput: 32 * MiB, reads: 6, readBytes: 16 * MiB, zips: 2, zip, bodies: 12 },
      () => true,
    );
    flooding = false;
    const quietResult = await victimRun;
    const peak = srv.peakRss();

    expect(quietResult.failures).toEqual([]);
    expect(quietResult.runs).toBeGreaterThan(quiet.length);
    expect(srv.alive).toBe(true);
    // every hostile request got one of the answers the server means to give
    const kinds = Object.fromEntries(tally);
    expect(kinds).toMatchObject({ 'exec 200': 3, 'max_output 422': 1, 'read 200': 6, 'zip 200': 2, 'oversized 413': 1 });
    expect((kinds['body 422'] ?? 0) + (kinds['body 429'] ?? 0)).toBe(12);
    expect((kinds['read_file 422'] ?? 0) + (kinds['read_file 429'] ?? 0)).toBe(1);
    expect(peak - warm, `peak ${peak >> 20} MiB after a warm ${warm >> 20} MiB`).toBeLessThan(ALLOWANCE);
  } finally {
    await srv.stop();
  }
});
