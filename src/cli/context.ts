/** Global options -> the registry and store a command works on. */
import { resolve } from 'node:path';
import { errorMessage, InvalidInputError } from '../errors.js';
import { openRegistry } from '../registry/open.js';
import type { Registry } from '../registry/registry.js';
import { StorePaths, defaultStoreDir } from '../store/paths.js';
import { ensurePrivateStore } from '../store/private.js';
import { Output } from './output.js';

export interface GlobalOptions {
  registry?: string;
  store?: string;
  json?: boolean;
}

export interface Context {
  registry: Registry;
  store: StorePaths;
  out: Output;
}

export function defaultRegistry(): string {
  return process.env.MINISANDBOX_REGISTRY ?? resolve('registry');
}

export function makeContext(g: GlobalOptions): Context {
  const out = new Output(g.json === true);
  return {
    // a retried request is said, so a registry that stopped answering is no silent hang
    registry: openRegistry(g.registry ?? defaultRegistry(), { hooks: { onRetry: (r) => out.progress({ phase: 'retry', message: `registry: ${r.what}: ${errorMessage(r.error)}; retry ${r.attempt} in ${r.delayMs} ms` }) } }),
    store: new StorePaths(g.store ?? defaultStoreDir()),
    out,
  };
}

/** The context of a command that reads or writes the store: the store is made (or checked) private first. */
export async function storeContext(g: GlobalOptions): Promise<Context> {
  const ctx = makeContext(g);
  await ensurePrivateStore(ctx.store, (m) => ctx.out.warn(m));
  return ctx;
}

/** `30s`, `15m`, `2h`, `7d`, or plain seconds. */
export function parseDuration(s: string): number {
  const m = /^(\d+(?:\.\d+)?)(ms|s|m|h|d)?$/.exec(s.trim());
  if (m === null) throw new InvalidInputError(`invalid duration ${JSON.stringify(s)}`, 'use e.g. 30s, 15m, 2h, 7d');
  const n = Number(m[1]);
  const unit = { ms: 1, s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 }[(m[2] ?? 's') as 'ms' | 's' | 'm' | 'h' | 'd'];
  return n * unit;
}

/** `512m`, `2g`, `1.5G`, `100k`, or bytes. */
export function parseSize(s: string): number {
  const m = /^(\d+(?:\.\d+)?)([kmgt]i?b?)?$/i.exec(s.trim());
  if (m === null) throw new InvalidInputError(`invalid size ${JSON.stringify(s)}`, 'use e.g. 512m, 2g');
  const u = (m[2] ?? '').toLowerCase()[0];
  const mult = u === 'k' ? 1024 : u === 'm' ? 1024 ** 2 : u === 'g' ? 1024 ** 3 : u === 't' ? 1024 ** 4 : 1;
  return Math.round(Number(m[1]) * mult);
}

/** `K=V` pairs from repeated --env options. */
export function parseEnvPairs(pairs: string[] | undefined): Record<string, string> {
  const out: Record<string, string> = {};
  for (const p of pairs ?? []) {
    const i = p.indexOf('=');
    if (i <= 0) throw new InvalidInputError(`invalid --env ${JSON.stringify(p)}`, 'use --env NAME=value');
    out[p.slice(0, i)] = p.slice(i + 1);
  }
  return out;
}
