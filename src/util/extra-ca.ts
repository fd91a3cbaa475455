/**
 * NODE_EXTRA_CA_CERTS, loaded late. Node reads and parses that file at every start, before any of
 * our code runs: where it names the system's whole CA bundle, as on these machines, that is ~40 ms
 * of every `minisandbox run`. bin/minisandbox therefore moves it to MINISANDBOX_DEFERRED_CA_CERTS
 * for the sandbox commands, whose only TLS peer is an S3 registry: that client adds the file to
 * node's own roots itself (s3.ts), and main.ts puts the variable back for child processes.
 */
import { readFileSync } from 'node:fs';

export const DEFERRED_CA_ENV = 'MINISANDBOX_DEFERRED_CA_CERTS';

/** Children started from here trust what we trust: NODE_EXTRA_CA_CERTS as the caller set it. */
export function restoreExtraCaEnv(env: NodeJS.ProcessEnv = process.env): void {
  const file = env[DEFERRED_CA_ENV];
  if (file !== undefined && file !== '' && env.NODE_EXTRA_CA_CERTS === undefined) env.NODE_EXTRA_CA_CERTS = file;
}

/**
 * The deferred file's PEM text, which a TLS client adds to node's bundled roots (`ca:
 * [...tls.rootCertificates, pem]`, what node would have trusted); undefined when nothing was
 * deferred. A file that cannot be read is ignored with a warning, as node does at start-up.
 */
export function deferredExtraCa(env: NodeJS.ProcessEnv = process.env, warn: (m: string) => void = (m) => process.emitWarning(m)): string | undefined {
  const file = env[DEFERRED_CA_ENV];
  if (file === undefined || file === '') return undefined;
  try {
    return readFileSync(file, 'utf8');
  } catch (e) {
    warn(`Ignoring extra certs from \`${file}\`, load failed: ${e instanceof Error ? e.message : String(e)}`);
    return undefined;
  }
}
