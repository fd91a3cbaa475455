/**
 * `minisandbox run` of an environment whose config has hundreds of variables runs the command,
 * in place (the process becomes the launcher) and with --json (the launcher spawned): the only
 * limit is the kernel's for one exec (ARG_MAX). The launcher used to refuse a 255th variable and
 * the run ended 125. An environment beyond the kernel's limit is refused before any sandbox is
 * made, exit 2 with a message that names the limit, not 125.
 */
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { publishedBusybox } from '../../test/helpers/published-busybox.js';
import { runCli } from '../../test/helpers/run-cli.js';
import { readdirOrEmpty } from '../util/fs.js';

const many = Object.fromEntries(Array.from({ length: 300 }, (_, i) => [`V${i}`, `value-${i}`]));
// 24 variables of 100 KiB: each within the kernel's 128 KiB a string, together past any ARG_MAX up to 2 MiB
const huge = Object.fromEntries(Array.from({ length: 24 }, (_, i) => [`BIG${i}`, 'x'.repeat(100 << 10)]));
const fits = publishedBusybox('ms-run-many-vars-', 'many/busybox', { env: many });
const past = publishedBusybox('ms-run-huge-vars-', 'huge/busybox', { env: huge });

const run = (work: string, args: string[]) => runCli(['--registry', join(work, 'registry'), '--store', join(work, 'store'), 'run', ...args]);

describe('run of an environment with many variables', () => {
  it('runs with 300 variables, in place and with --json', async () => {
    const inPlace = await run(fits.work, ['many/busybox', '--', 'sh', '-c', 'echo "$V0 $V299"']);
    expect(inPlace, inPlace.stderr).toMatchObject({ code: 0, stdout: 'value-0 value-299\n' });
    const json = await run(fits.work, ['--json', 'many/busybox', '--', 'sh', '-c', 'echo "$V0 $V299"']);
    expect(json.code, json.stderr).toBe(0);
    expect(JSON.parse(json.stdout)).toMatchObject({ status: 'ok', exitCode: 0, stdout: 'value-0 value-299\n' });
  });

  it("refuses an environment past the kernel's limit with exit 2 and says so, before making a sandbox", async () => {
    for (const json of [[], ['--json']]) {
      const r = await run(past.work, [...json, 'huge/busybox', '--', 'true']);
      expect(r.code, r.stderr).toBe(2);
      expect(r.stderr).toMatch(/env.*ARG_MAX/);
      expect(await readdirOrEmpty(join(past.work, 'store', 'sandboxes'))).toEqual([]);
    }
  });
});
