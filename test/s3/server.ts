/**
 * A real S3-protocol server for tests and benchmarks: s3rver (npm) in a child process on a random
 * loopback port, with a fresh data directory and one bucket. A child rather than in-process so the
 * server's CPU is not the test's event loop (benchmarks on two cores) and a crash cannot take the
 * test runner with it.
 */
import { spawn } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { z } from 'zod';

export interface S3TestServer {
  /** `http://127.0.0.1:<port>` (`https://` with tls) */
  endpoint: string;
  port: number;
  bucket: string;
  /** s3rver accepts any signature made with these. */
  credentials: { accessKeyId: string; secretAccessKey: string };
  region: string;
  /** Where s3rver keeps objects (tests may inspect it). */
  directory: string;
  stop(): Promise<void>;
}

const ReadySchema = z.strictObject({ port: z.number().int().positive() });

const CHILD = `
const S3rver = require(process.env.S3RVER_MAIN);
const fs = require('fs');
const tls = process.env.S3RVER_KEY ? { key: fs.readFileSync(process.env.S3RVER_KEY), cert: fs.readFileSync(process.env.S3RVER_CERT) } : {};
const server = new S3rver({
  address: '127.0.0.1', port: 0, silent: true, directory: process.env.S3RVER_DIR,
  configureBuckets: [{ name: process.env.S3RVER_BUCKET }], ...tls,
});
server.run().then((a) => process.stdout.write(JSON.stringify({ port: a.port }) + '\\n'), (e) => { console.error(e); process.exit(1); });
process.on('SIGTERM', () => server.close().finally(() => process.exit(0)));
// The parent closing our stdin (or dying) stops us: no orphan servers after a crashed test run.
process.stdin.resume();
process.stdin.on('end', () => process.exit(0));
`;

/** tls: PEM files of the server's key and certificate, for an `https://` endpoint. */
export async function startS3Server(opts: { bucket?: string; timeoutMs?: number; tls?: { keyFile: string; certFile: string } } = {}): Promise<S3TestServer> {
  const bucket = opts.bucket ?? 'minisandbox-test';
  const directory = await mkdtemp(join(tmpdir(), 's3rver-'));
  const main = createRequire(import.meta.url).resolve('s3rver');
  // s3rver makes ListObjectsV2 continuation tokens with DES, which OpenSSL 3 only has in its
  // legacy provider: without it every second listing page is a 500.
  const child = spawn(process.execPath, ['--openssl-legacy-provider', '-e', CHILD], {
    env: {
      ...process.env,
      S3RVER_MAIN: main,
      S3RVER_DIR: directory,
      S3RVER_BUCKET: bucket,
      ...(opts.tls === undefined ? {} : { S3RVER_KEY: opts.tls.keyFile, S3RVER_CERT: opts.tls.certFile }),
    },
    stdio: ['pipe', 'pipe', 'pipe'],
  });
  let stderr = '';
  child.stderr.setEncoding('utf8').on('data', (s: string) => {
    stderr = (stderr + s).slice(-4000);
  });
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  try {
    const port = await new Promise<number>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`s3rver did not start within ${opts.timeoutMs ?? 20_000} ms: ${stderr}`)), opts.timeoutMs ?? 20_000);
      let out = '';
      child.stdout.setEncoding('utf8').on('data', (s: string) => {
        out += s;
        const line = out.split('\n')[0];
        if (out.includes('\n') && line !== undefined) {
          clearTimeout(timer);
          try {
            resolve(ReadySchema.parse(JSON.parse(line)).port);
          } catch (e) {
            reject(e instanceof Error ? e : new Error(String(e)));
          }
        }
      });
      child.once('exit', (code) => {
        clearTimeout(timer);
        reject(new Error(`s3rver exited with ${code}: ${stderr}`));
      });
    });
    let stopped = false;
    return {
      endpoint: `${opts.tls === undefined ? 'http' : 'https'}://127.0.0.1:${port}`,
      port,
      bucket,
      credentials: { accessKeyId: 'S3RVER', secretAccessKey: 'S3RVER' },
      region: 'us-east-1',
      directory,
      async stop() {
        if (stopped) return;
        stopped = true;
        child.kill('SIGTERM');
        const killTimer = setTimeout(() => child.kill('SIGKILL'), 5_000);
        await exited;
        clearTimeout(killTimer);
        await rm(directory, { recursive: true, force: true });
      },
    };
  } catch (e) {
    child.kill('SIGKILL');
    await exited;
    await rm(directory, { recursive: true, force: true });
    throw e;
  }
}
