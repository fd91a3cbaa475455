/**
 * The registry host of tests whose nodes are hosts of their own (network namespaces, see
 * clients/python/tests/test_pool_over_hosts_in_network_namespaces.py): a real S3 server (s3rver,
 * server.ts) on this host's loopback, behind one request-logging proxy (faulty-proxy.ts, no faults)
 * per client, each listening on `--host`, so that what each client fetched is told apart by the
 * endpoint it was given. Run inside the host's namespace:
 *
 *   node --import tsx test/s3/registry-host.ts --host 10.7.0.2 --clients 4
 *
 * prints one JSON line `{"bucket", "region", "credentials", "endpoints": [...]}`; each line `log`
 * on stdin is answered with one line `{"logs": [[{method, path, range}, ...], ...]}` (by endpoint);
 * the end of stdin stops the servers (and so does the parent's death).
 */
import { createInterface } from 'node:readline';
import { parseArgs } from 'node:util';
import { type FaultyProxy, startFaultyProxy } from './faulty-proxy.js';
import { startS3Server } from './server.js';

const { values } = parseArgs({ options: { host: { type: 'string' }, clients: { type: 'string', default: '1' } } });
const host = values.host ?? '127.0.0.1';
const clients = Number(values.clients);
if (!Number.isInteger(clients) || clients < 1 || clients > 64) throw new Error(`--clients ${values.clients}: a number from 1 to 64`);

const server = await startS3Server();
const proxies: FaultyProxy[] = [];
for (let i = 0; i < clients; i++) proxies.push(await startFaultyProxy(server.endpoint, {}, { host, lifetimeMs: 3_600_000 }));
process.stdout.write(
  `${JSON.stringify({ bucket: server.bucket, region: server.region, credentials: server.credentials, endpoints: proxies.map((p) => p.endpoint) })}\n`,
);

const stop = async (): Promise<void> => {
  await Promise.all(proxies.map((p) => p.stop()));
  await server.stop();
  process.exit(0);
};
const lines = createInterface({ input: process.stdin });
lines.on('line', (line) => {
  if (line.trim() !== 'log') return;
  const logs = proxies.map((p) => p.log.map((r) => ({ method: r.method, path: r.path, range: r.range ?? null })));
  process.stdout.write(`${JSON.stringify({ logs })}\n`);
});
lines.on('close', () => void stop());
process.on('SIGTERM', () => void stop());
