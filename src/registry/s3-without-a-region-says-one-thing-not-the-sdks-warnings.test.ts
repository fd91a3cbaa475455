/**
 * An S3 registry named without a region: the CLI talks to a custom endpoint with no word from
 * the SDK (it printed a 9-line NodeVersionSupportWarning on every command), and where AWS itself
 * would be asked, it says in one line and a hint what to set, instead of "Region is missing" and
 * advice about credentials and the network.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runCli } from '../../test/helpers/run-cli.js';
import { type S3TestServer, startS3Server } from '../../test/s3/server.js';

let s3: S3TestServer;
beforeAll(async () => {
  s3 = await startS3Server();
});
afterAll(async () => {
  await s3?.stop();
});

/** Our environment without any AWS setting, plus `extra`. */
function envWith(extra: Record<string, string>): NodeJS.ProcessEnv {
  const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('AWS_')));
  return { ...env, AWS_ACCESS_KEY_ID: s3.credentials.accessKeyId, AWS_SECRET_ACCESS_KEY: s3.credentials.secretAccessKey, ...extra };
}

describe('an S3 registry without a region', () => {
  it('on a custom endpoint, answers with no SDK warning at all', async () => {
    const r = await runCli(['--registry', `s3://${s3.bucket}/p?endpoint=${s3.endpoint}`, 'ls'], envWith({ HOME: '/nonexistent' }));
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    expect(r.stdout).toContain(`no refs in s3://${s3.bucket}/p`);
  });

  it("on AWS's own endpoint, says what to set in one line and a hint", async () => {
    const r = await runCli(['--registry', 's3://some-bucket/p', 'ls'], envWith({ HOME: '/nonexistent' }));
    expect(r.code).toBe(2);
    const lines = r.stderr.trimEnd().split('\n');
    expect(lines).toHaveLength(2);
    expect(lines[0]).toMatch(/^error: .*no region/);
    expect(lines[1]).toMatch(/^hint: .*AWS_REGION.*\?region=/);
  });
});
