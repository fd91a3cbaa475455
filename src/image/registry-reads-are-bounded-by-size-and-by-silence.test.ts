/**
 * Issue 25: a hostile or broken registry cannot exhaust the importer. Every body read from a
 * registry is bounded by the bytes actually received (a chunked, length-less body gets no more
 * room than a declared one), by silence (no byte for `silenceMs` while one is awaited, headers
 * included), and against drips: documents (manifests, configs, tokens) must be whole within
 * `deadlineMs`, blobs must keep `minBytesPerSecond` over each `silenceMs` of waiting. A silence
 * alone does not stop a drip of one byte per quarter second under a one-second silence limit;
 * the deadline and the rate do. Each failure names the registry and what was being read, and a
 * rerun after the fault imports the image.
 */
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type HostileRegistry, startHostileRegistry } from '../../test/helpers/hostile-registry.js';
import { makeTar, writeLayout } from '../../test/helpers/oci-layout.js';
import { LocalRegistry } from '../registry/local.js';
import { StorePaths } from '../store/paths.js';
import { importImage, type ImportImageOptions } from './import.js';

const work = mkdtempSync(join(tmpdir(), 'ms-hostile-registry-'));
let plain: HostileRegistry;
let bearer: HostileRegistry;
let n = 0;

beforeAll(async () => {
  const layout = join(work, 'layout');
  // a layer of 512 KiB that does not compress: a stall half-way is mid-blob, a resume is a real Range
  const tar = await makeTar([
    { name: 'data/', type: 'directory' },
    { name: 'data/big.bin', data: randomBytes(512 << 10).toString('latin1') },
    { name: 'data/small.txt', data: 'small\n' },
  ]);
  writeLayout(layout, [{ layers: [{ blob: tar, tar }] }]);
  plain = await startHostileRegistry(layout);
  bearer = await startHostileRegistry(layout, { bearer: true });
  plain.dripMs = 100;
});

afterAll(async () => {
  await plain?.stop();
  await bearer?.stop();
  rmSync(work, { recursive: true, force: true });
});

function fresh(): { reg: LocalRegistry; store: StorePaths } {
  n++;
  return { reg: new LocalRegistry(join(work, `reg-${n}`)), store: new StorePaths(join(work, `store-${n}`)) };
}

/** Short bounds for the faulty run: what is asserted is the outcome, never how long it took. */
const short: ImportImageOptions = { tlsVerify: false, attempts: 2, retryDelayMs: 5, silenceMs: 1000, deadlineMs: 1500 };
/** A drip's byte every 100 ms is ten times within the silence limit: only the deadline or the rate can stop it. */
const dripping: ImportImageOptions = { ...short, attempts: 1 };

async function importFrom(r: HostileRegistry, o: ImportImageOptions, at = fresh()): Promise<Awaited<ReturnType<typeof importImage>>> {
  return importImage(at.reg, at.store, `docker://${r.host}/${r.repository}:latest`, { tag: 'h/img', ...o });
}

/** The fault fails the import as `expected` says and tags nothing; the same import then succeeds once the registry behaves. */
async function failsThenRecovers(r: HostileRegistry, o: ImportImageOptions, expected: Record<string, unknown>): Promise<void> {
  const at = fresh();
  await expect(importFrom(r, o, at)).rejects.toMatchObject(expected);
  expect(await at.reg.getRef('h/img')).toBeNull();
  r.faults = {};
  const again = await importFrom(r, { tlsVerify: false }, at);
  expect(again.status).toBe('imported');
  expect(await at.reg.getRef('h/img')).toBe(again.env);
}

describe('size: the bytes received are capped, declared or not', () => {
  it.each([
    ['manifest', 4 << 20, /manifest hostile\/img:latest from 127\.0\.0\.1:\d+ is larger than 4194304 bytes/],
    ['config', 4 << 20, /blob sha256:\w+ \(config\) from 127\.0\.0\.1:\d+ sent more than the \d+ bytes its descriptor declares/],
  ] as const)('an endless chunked %s body fails the import once past its limit', async (target, limit, message) => {
    plain.faults = { [target]: { does: 'endless' } };
    plain.maxSent = {};
    await failsThenRecovers(plain, { tlsVerify: false }, { code: 'INVALID_INPUT', message: expect.stringMatching(message) });
    // the client hung up at its limit: what the server pushed is the limit plus socket buffers
    expect(plain.maxSent[target]).toBeLessThan(limit + (32 << 20));
  });

  it('an endless chunked token body fails the import once past its limit', async () => {
    bearer.faults = { token: { does: 'endless' } };
    bearer.maxSent = {};
    await failsThenRecovers(
      bearer,
      { tlsVerify: false },
      {
        code: 'INVALID_INPUT',
        message: expect.stringMatching(/token server http:\/\/127\.0\.0\.1:\d+ sent more than 1048576 bytes/),
      },
    );
    expect(bearer.maxSent.token).toBeLessThan((1 << 20) + (32 << 20));
  });
});

describe('silence and drips: a bounded wait, then a clear error naming the registry and what it read', () => {
  it('a registry that accepts and never answers a manifest request', async () => {
    plain.faults = { manifest: { does: 'silent' } };
    await failsThenRecovers(plain, short, {
      code: 'REGISTRY_UNREACHABLE',
      message: expect.stringMatching(/manifest hostile\/img:latest from 127\.0\.0\.1:\d+: .*no byte for 1 s/),
      hint: expect.stringMatching(/stopped sending/),
    });
  });

  it('a token server that accepts and never answers', async () => {
    bearer.faults = { token: { does: 'silent' } };
    await failsThenRecovers(bearer, short, {
      code: 'REGISTRY_UNREACHABLE',
      message: expect.stringMatching(/token server http:\/\/127\.0\.0\.1:\d+: no byte for 1 s/),
    });
  });

  it('a manifest dripped a byte at a time, each well within the silence limit, is cut at the deadline', async () => {
    plain.faults = { manifest: { does: 'drip' } };
    await failsThenRecovers(plain, dripping, {
      code: 'REGISTRY_UNREACHABLE',
      message: expect.stringMatching(/manifest hostile\/img:latest from 127\.0\.0\.1:\d+: .*not whole within 1.5 s/),
    });
  });

  it('a config blob dripped a byte at a time is cut at the deadline', async () => {
    plain.faults = { config: { does: 'drip' } };
    await failsThenRecovers(plain, dripping, {
      code: 'REGISTRY_UNREACHABLE',
      message: expect.stringMatching(/blob sha256:\w+ \(config\) from 127\.0\.0\.1:\d+: .*not whole within 1.5 s/),
    });
  });

  it('a layer blob dripped a byte at a time is cut for its rate', async () => {
    plain.faults = { layer: { does: 'drip' } };
    await failsThenRecovers(plain, dripping, {
      code: 'REGISTRY_UNREACHABLE',
      message: expect.stringMatching(/blob sha256:\w+ from 127\.0\.0\.1:\d+: .*slower than 1024 bytes\/s/),
    });
  });

  it('a registry that stops mid-blob, the connection left open, fails the import', async () => {
    plain.faults = { layer: { does: 'stall-half' } };
    await failsThenRecovers(plain, short, {
      code: 'REGISTRY_UNREACHABLE',
      message: expect.stringMatching(/blob sha256:\w+ from 127\.0\.0\.1:\d+: .*no byte for 1 s/),
      hint: expect.stringMatching(/rerun resumes/),
    });
  });

  it('a stall mid-blob once is resumed from the byte reached within the same import', async () => {
    plain.faults = { layer: { does: 'stall-half', times: 1 } };
    plain.log.length = 0;
    // five attempts: a resumed request cut again by a busy machine is resumed once more
    await expect(importFrom(plain, { tlsVerify: false, silenceMs: 1000, retryDelayMs: 5 })).resolves.toMatchObject({ status: 'imported' });
    const layer = plain.log.filter((l) => l.startsWith('GET layer'));
    expect(layer[0]).toBe('GET layer');
    expect(layer.slice(1)).toEqual(expect.arrayContaining(['GET layer range']));
    expect(layer.slice(1).every((l) => l === 'GET layer range')).toBe(true);
  });
});
