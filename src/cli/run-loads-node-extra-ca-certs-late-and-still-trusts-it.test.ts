/**
 * bin/minisandbox keeps node from parsing NODE_EXTRA_CA_CERTS at the start of the sandbox commands
 * (util/extra-ca.ts): a run must still trust that CA where it talks TLS, an S3 registry, and every
 * other command must still get node's own load of it.
 */
import { execFileSync } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { publishedBusybox } from '../../test/helpers/published-busybox.js';
import { runCli } from '../../test/helpers/run-cli.js';
import { type S3TestServer, startS3Server } from '../../test/s3/server.js';
import { DEFERRED_CA_ENV, deferredExtraCa, restoreExtraCaEnv } from '../util/extra-ca.js';

const TAG = 'ca/busybox';
const { work } = publishedBusybox('ms-extra-ca-', TAG);
const localRegistry = join(work, 'registry');
const caFile = join(work, 'ca.pem');
const missingCa = join(work, 'no-such-ca.pem');
const NODE_WARNING = 'Ignoring extra certs from';

/** A CA of the test's own and a certificate it signed for 127.0.0.1, as PEM files. */
function makeCa(): { keyFile: string; certFile: string } {
  const ssl = (args: string[]): void => {
    execFileSync('openssl', args, { cwd: work, stdio: 'pipe' });
  };
  const ec = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes'];
  ssl(['req', '-x509', ...ec, '-keyout', 'ca.key', '-out', caFile, '-days', '2', '-subj', '/CN=minisandbox test CA']);
  ssl(['req', ...ec, '-keyout', 'server.key', '-out', 'server.csr', '-subj', '/CN=127.0.0.1']);
  writeFileSync(join(work, 'server.ext'), 'subjectAltName=IP:127.0.0.1\n');
  ssl([
    'x509',
    '-req',
    '-in',
    'server.csr',
    '-CA',
    caFile,
    '-CAkey',
    'ca.key',
    '-CAcreateserial',
    '-out',
    'server.pem',
    '-days',
    '2',
    '-extfile',
    'server.ext',
  ]);
  return { keyFile: join(work, 'server.key'), certFile: join(work, 'server.pem') };
}

/** Our environment without any CA variable of the caller's, plus s3rver's credentials and `extra`. */
function envWith(extra: Record<string, string>): NodeJS.ProcessEnv {
  const { NODE_EXTRA_CA_CERTS: _n, [DEFERRED_CA_ENV]: _d, ...rest } = process.env;
  return { ...rest, AWS_ACCESS_KEY_ID: 'S3RVER', AWS_SECRET_ACCESS_KEY: 'S3RVER', AWS_REGION: 'us-east-1', ...extra };
}

describe('NODE_EXTRA_CA_CERTS, loaded late for the sandbox commands', () => {
  let s3: S3TestServer;
  let s3Registry: string;
  beforeAll(async () => {
    s3 = await startS3Server({ tls: makeCa() });
    s3Registry = `s3://${s3.bucket}/ca?endpoint=${encodeURIComponent(s3.endpoint)}`;
    // copy is no sandbox command: node itself loads the CA for it
    const copied = await runCli(['copy', '--from', localRegistry, '--to', s3Registry, '--all'], envWith({ NODE_EXTRA_CA_CERTS: caFile }));
    expect(copied.code, copied.stderr).toBe(0);
  });
  afterAll(async () => {
    await s3?.stop();
  });

  it('a run pulls over TLS from an S3 registry whose CA only NODE_EXTRA_CA_CERTS names', async () => {
    const r = await runCli(
      ['--registry', s3Registry, '--store', join(work, 'store-trusted'), 'run', TAG, '--', 'echo', 'over-tls'],
      envWith({ NODE_EXTRA_CA_CERTS: caFile }),
    );
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toBe('over-tls\n');
  });

  it('without that CA the same run fails on the certificate, saying how to trust it', async () => {
    const r = await runCli(['--registry', s3Registry, '--store', join(work, 'store-untrusted'), 'run', TAG, '--', 'true'], envWith({}));
    expect(r.code).not.toBe(0);
    expect(r.stderr).toMatch(/certificate/i);
    expect(r.stderr).toContain('set NODE_EXTRA_CA_CERTS');
  });

  it('a sandbox command never has node parse the file; one that reaches TLS reads it and warns as node does when it is missing', async () => {
    const env = envWith({ NODE_EXTRA_CA_CERTS: missingCa });
    const local = await runCli(['--registry', localRegistry, '--store', join(work, 'store-local'), 'run', TAG, '--', 'true'], env);
    expect(local.code, local.stderr).toBe(0);
    expect(local.stderr).not.toContain(NODE_WARNING);
    const overTls = await runCli(['--registry', s3Registry, '--store', join(work, 'store-missing'), 'run', TAG, '--', 'true'], env);
    expect(overTls.stderr).toContain(`${NODE_WARNING} \`${missingCa}\``);
    expect(overTls.code).not.toBe(0);
  });

  it('a run whose node trusts the system store (NODE_OPTIONS --use-openssl-ca) gets node’s own load of it', async () => {
    const env = envWith({ NODE_EXTRA_CA_CERTS: missingCa, NODE_OPTIONS: '--use-openssl-ca' });
    const r = await runCli(['--registry', localRegistry, '--store', join(work, 'store-openssl'), 'run', TAG, '--', 'true'], env);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stderr).toContain(`${NODE_WARNING} \`${missingCa}\``);
  });

  it('every other command gets node’s own load of it', async () => {
    const r = await runCli(['--registry', localRegistry, '--store', join(work, 'store-ls'), 'ls'], envWith({ NODE_EXTRA_CA_CERTS: missingCa }));
    expect(r.code, r.stderr).toBe(0);
    expect(r.stderr).toContain(`${NODE_WARNING} \`${missingCa}\``);
  });
});

describe('the deferred CA in the process environment', () => {
  it('goes back to NODE_EXTRA_CA_CERTS for children, never over one the process set itself', () => {
    const env: NodeJS.ProcessEnv = { [DEFERRED_CA_ENV]: '/a.pem' };
    restoreExtraCaEnv(env);
    expect(env.NODE_EXTRA_CA_CERTS).toBe('/a.pem');
    const own: NodeJS.ProcessEnv = { [DEFERRED_CA_ENV]: '/a.pem', NODE_EXTRA_CA_CERTS: '/b.pem' };
    restoreExtraCaEnv(own);
    expect(own.NODE_EXTRA_CA_CERTS).toBe('/b.pem');
  });

  it('is read only where one was deferred', () => {
    const warnings: string[] = [];
    expect(deferredExtraCa({}, (m) => warnings.push(m))).toBeUndefined();
    expect(deferredExtraCa({ [DEFERRED_CA_ENV]: missingCa }, (m) => warnings.push(m))).toBeUndefined();
    expect(warnings).toEqual([expect.stringContaining(missingCa)]);
  });
});
