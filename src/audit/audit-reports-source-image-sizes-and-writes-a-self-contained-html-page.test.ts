import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { gzipSync } from 'node:zlib';
import { afterAll, describe, expect, it } from 'vitest';
import { makeTar, writeLayout } from '../../test/helpers/oci-layout.js';
import { importImage } from '../image/import.js';
import { LocalRegistry } from '../registry/local.js';
import { StorePaths } from '../store/paths.js';
import { audit } from './audit.js';
import { auditHtml } from './html.js';

const work = mkdtempSync(join(tmpdir(), 'ms-audit-html-'));
afterAll(() => rmSync(work, { recursive: true, force: true }));

describe('audit of refs imported from images', () => {
  it("reports each image's compressed and uncompressed sizes, counts a shared base once, and charts storage as refs are added", async () => {
    const baseTar = await makeTar([
      { name: 'usr/', type: 'directory' },
      { name: 'usr/lib.so', data: 'L'.repeat(50_000) },
    ]);
    const own = async (s: string): Promise<Buffer> =>
      makeTar([
        { name: 'app/', type: 'directory' },
        { name: 'app/x', data: s.repeat(1000) },
      ]);
    const base = { blob: gzipSync(baseTar), tar: baseTar };
    const a = await own('a');
    const b = await own('b');
    writeLayout(join(work, 'layout'), [
      { tag: 'a', layers: [base, { blob: gzipSync(a), tar: a }] },
      { tag: 'b', layers: [base, { blob: gzipSync(b), tar: b }] },
    ]);
    const reg = new LocalRegistry(join(work, 'registry'));
    const store = new StorePaths(join(work, 'store'));
    await importImage(reg, store, `oci:${join(work, 'layout')}:a`, { tag: 't/a' });
    await importImage(reg, store, `oci:${join(work, 'layout')}:b`, { tag: 't/b' });

    const r = await audit(reg);
    expect(r.refs.map((x) => x.ref)).toEqual(['t/a', 't/b']);
    const refA = r.refs[0]!;
    expect(refA.imageCompressedBytes).toBe(base.blob.length + gzipSync(a).length);
    expect(refA.imageBytes).toBe(baseTar.length + a.length);
    // the base layer once, each image's own layer once
    expect(r.totals.imageCompressedBytes).toBe(base.blob.length + gzipSync(a).length + gzipSync(b).length);
    expect(r.cumulative).toHaveLength(2);
    expect(r.cumulative[1]!.perTaskBytes).toBe(r.totals.logicalBytes);
    expect(r.cumulative[1]!.registryBytes).toBeGreaterThan(r.cumulative[0]!.registryBytes);
    // what the refs reach is all the registry holds here, bookkeeping refs aside
    expect(r.cumulative[1]!.registryBytes).toBeLessThanOrEqual(r.totals.registryBytes);

    const html = auditHtml(r, new Date(0));
    expect(html).toContain('<svg');
    expect(html.match(/<polyline /g)).toHaveLength(5);
    expect(html).toContain('t/a');
    expect(html).toContain('source image, compressed');
    // self-contained: nothing to fetch (the SVG namespace is a name, not a request)
    expect(html.replaceAll('xmlns="http://www.w3.org/2000/svg"', '')).not.toMatch(/(src|href)=|https?:/);
  });
});
