/**
 * The sandbox POST /v1/evaluate grades in is the server's own: GET /v1/sandboxes does not list it
 * and its id reaches nothing, yet it holds a slot (/v1/capacity counts it, a create beyond the
 * cap is 429) and it ends when the client that asked for the evaluation goes away mid-grading.
 * Real HTTP, SWE-bench-like images, an eval whose test command sleeps until it is killed.
 */
import { chmodSync, mkdtempSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { eventually } from '../../test/helpers/eventually.js';
import { removeWorkDir } from '../../test/helpers/images.js';
import { sleepMarker, sleepRuns } from '../../test/helpers/sleep-marker.js';
import { type SwebenchLikeImages, swebenchLikeImages, writeShlibSpecs } from '../../test/helpers/swebench-like-images.js';
import { importDatasetImages } from '../image/dataset-images.js';
import { LocalRegistry } from '../registry/local.js';
import { StorePaths } from '../store/paths.js';
import { type RunningServer, startServer } from './serve.js';

const work = mkdtempSync(join(tmpdir(), 'ms-serve-evalsb-'));
chmodSync(work, 0o755); // the sandboxes' subordinate ids must reach the store below it
const store = new StorePaths(join(work, 'store'));
const marker = sleepMarker();
let images: SwebenchLikeImages;
let srv: RunningServer;
let token: string;

beforeAll(async () => {
  images = await swebenchLikeImages();
  const reg = new LocalRegistry(join(work, 'registry'));
  const row = images.rows.find((r) => r.instance_id === 'test__shlib-1')!;
  await importDatasetImages(reg, store, [
    { instanceId: row.instance_id, source: `oci:${images.layout}:${images.tagFor(row.instance_id)}`, tag: `data/${row.instance_id}` },
  ]);
  writeFileSync(join(work, 'data.jsonl'), `${JSON.stringify(row)}\n`);
  writeShlibSpecs(join(work, 'specs.yaml'), images, {
    image: `oci:${images.layout}:sweb.eval.x86_64.{id}`,
    // the grading runs until it is killed: the evaluation is still going when the client leaves
    testCmd: `sleep ${marker}; true`, // the test files are appended to the command
  });
  srv = await startServer(
    reg,
    store,
    {
      listen: { host: '127.0.0.1', port: 0 },
      tokenFile: join(work, 'token'),
      maxSandboxes: 1,
      idleTimeoutMs: 600_000,
      ttlMs: 3_600_000,
      evalDatasets: [{ rows: join(work, 'data.jsonl'), specs: join(work, 'specs.yaml') }],
      reportsDir: join(work, 'reports'),
    },
    () => undefined,
  );
  token = readFileSync(join(work, 'token'), 'utf8').trim();
}, 900_000);

afterAll(async () => {
  await srv?.close();
  removeWorkDir(work);
});

async function call(method: string, path: string, body?: unknown, signal?: AbortSignal): Promise<{ status: number; json: Record<string, unknown> }> {
  const r = await fetch(`${srv.url}${path}`, {
    method,
    headers: { authorization: `Bearer ${token}`, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    ...(signal === undefined ? {} : { signal }),
  });
  const text = await r.text();
  return { status: r.status, json: text === '' ? {} : (JSON.parse(text) as Record<string, unknown>) };
}

describe("an evaluation's sandbox", () => {
  it('is not listed nor reachable, counts against capacity, and is destroyed when the client disconnects mid-evaluation', async () => {
    const client = new AbortController();
    const row = images.rows.find((r) => r.instance_id === 'test__shlib-1')!;
    const evaluation = call(
      'POST',
      '/v1/evaluate',
      { dataset: 'data', instance_id: 'test__shlib-1', patch: row.patch, model: 'm', run_id: 'r' },
      client.signal,
    ).catch((e: unknown) => e);
    // the eval script reached the test command: the evaluation's sandbox is up and grading
    await eventually(() => sleepRuns(marker));
    const [id] = readdirSync(store.sandboxesDir);
    expect(id).toBeDefined();

    expect((await call('GET', '/v1/sandboxes')).json).toEqual({ sandboxes: [] });
    for (const [method, path, body] of [
      ['GET', `/v1/sandboxes/${id}`],
      ['POST', `/v1/sandboxes/${id}/exec`, { command: 'true' }],
      ['DELETE', `/v1/sandboxes/${id}`],
    ] as const) {
      const r = await call(method, path, body);
      expect([method, path, r.status, (r.json.error as { code?: string } | undefined)?.code]).toEqual([method, path, 404, 'NOT_FOUND']);
    }
    expect((await call('GET', '/v1/capacity')).json).toMatchObject({ live: 1, max: 1 });
    // the one slot is the evaluation's: a client's create is refused
    const full = await call('POST', '/v1/sandboxes', { ref: 'data/test__shlib-1' });
    expect([full.status, (full.json.error as { code: string }).code]).toEqual([429, 'CAPACITY']);
    expect(sleepRuns(marker)).toBe(true);

    client.abort();
    expect(await evaluation).toBeInstanceOf(Error);
    await eventually(() => srv.manager.live === 0 && !sleepRuns(marker) && readdirSync(store.sandboxesDir).length === 0);
    expect((await call('GET', '/v1/capacity')).json).toMatchObject({ live: 0 });
    // nothing was recorded for a grading that never finished
    expect(() => readFileSync(join(work, 'reports', 'm.r.json'))).toThrow();
  }, 600_000);
});
