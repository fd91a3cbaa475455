/**
 * The audit page as a team would look at it: rendered by a real headless Chromium (Debian's, driven
 * by playwright-core), every figure it shows equal to `audit --json`'s, like compared with like in
 * charts whose every legend entry draws a line of its own, readable axes, a tag that would not pull
 * flagged. The screenshot stays in logs/test-artifacts/ for a person to look at.
 */
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { gzipSync } from 'node:zlib';
import { chromium } from 'playwright-core';
import { afterAll, describe, expect, it } from 'vitest';
import { makeTar, writeLayout } from '../../test/helpers/oci-layout.js';
import { runCli } from '../../test/helpers/run-cli.js';
import { importImage } from '../image/import.js';
import { envClosure } from '../registry/closure.js';
import { LocalRegistry } from '../registry/local.js';
import { StorePaths } from '../store/paths.js';
import { type AuditReport, AuditReportSchema } from './audit.js';

const CHROMIUM = '/usr/bin/chromium';
const work = mkdtempSync(join(tmpdir(), 'ms-audit-chromium-'));
afterAll(() => rmSync(work, { recursive: true, force: true }));

/** The JSON value a page figure names: `totals.logicalBytes`, `refs[2].imageBytes`, `cumulative[-1].registryBytes`. */
function valueAt(r: AuditReport, key: string): number {
  const t = r.totals;
  if (key === 'saved.uncompressed') return t.logicalBytes - t.uniqueContentBytes;
  if (key === 'saved.layerShared') return t.dockerStyleBytes - t.uniqueContentBytes;
  if (key === 'saved.compressed') return t.imageCompressedBytes - t.reachedRegistryBytes;
  let v: unknown = r;
  for (const [, name, index] of key.matchAll(/([A-Za-z]+)(?:\[(-?\d+)\])?/g)) {
    v = (v as Record<string, unknown>)[name!];
    if (index !== undefined) v = (v as unknown[]).at(Number(index));
  }
  if (typeof v !== 'number') throw new Error(`${key} is not a number in audit --json`);
  return v;
}

describe.skipIf(!existsSync(CHROMIUM))('audit --html in a real browser', () => {
  it('renders the numbers of audit --json, two like-for-like charts with labelled axes, and flags a tag that would not pull', async () => {
    const common = 'C'.repeat(30_000);
    const baseTar = await makeTar([
      { name: 'usr/', type: 'directory' },
      { name: 'usr/lib.so', data: 'L'.repeat(200_000) },
    ]);
    // each task's own layer: its own file, and a file every task has (one content, many layers)
    const own = (s: string): Promise<Buffer> =>
      makeTar([
        { name: 'app/', type: 'directory' },
        { name: 'app/common', data: common },
        { name: `app/${s}`, data: s.repeat(5000) },
      ]);
    const base = { blob: gzipSync(baseTar), tar: baseTar };
    const names = ['a', 'b', 'c', 'd'];
    const images = await Promise.all(names.map(async (n) => ({ tag: n, layers: [base, await own(n).then((t) => ({ blob: gzipSync(t), tar: t }))] })));
    writeLayout(join(work, 'layout'), images);
    const registry = join(work, 'registry');
    const reg = new LocalRegistry(registry);
    const store = new StorePaths(join(work, 'store'));
    const tags = ['t/a', 't/b', 't/c', 'u/d'];
    for (const [i, tag] of tags.entries()) await importImage(reg, store, `oci:${join(work, 'layout')}:${names[i]}`, { tag });
    // u/d loses a blob no other tag reaches: a pull of it would fail
    const others = new Set<string>();
    for (const tag of tags.slice(0, 3)) for (const b of (await envClosure(reg, (await reg.getRef(tag))!)).blobs) others.add(b);
    const d = (await reg.getRef('u/d'))!;
    // a pack or manifest, not the config: the tag still reads, its sizes still count
    const lost = [...(await envClosure(reg, d)).blobs].find((b) => b !== d && !others.has(b))!;
    await reg.deleteBlob(lost);

    // into a directory not made yet, as `-o dir/file` of most tools
    const page = join(work, 'out', 'report', 'audit.html');
    const ran = await runCli(['--registry', registry, '--store', join(work, 'store'), '--json', 'audit', '--html', page]);
    expect(ran.stderr).toBe('');
    expect(ran.code).toBe(0);
    const r = AuditReportSchema.parse(JSON.parse(ran.stdout));
    expect(r.totals.unpullableRefs).toBe(1);
    expect(r.datasets.map((d) => [d.dataset, d.refs])).toEqual([
      ['t', 3],
      ['u', 1],
    ]);

    const browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--no-sandbox', '--disable-background-networking'] });
    try {
      const tab = await browser.newPage({ viewport: { width: 1100, height: 900 } });
      const requested: string[] = [];
      tab.on('request', (q) => requested.push(q.url()));
      await tab.goto(pathToFileURL(page).href);
      // self-contained: the page is the only thing it loads
      expect(requested).toEqual([pathToFileURL(page).href]);

      const figures = await tab.$$eval('[data-key]', (els) =>
        els.map((e) => ({ key: e.getAttribute('data-key') ?? '', value: Number(e.getAttribute('data-value')), text: e.textContent ?? '' })),
      );
      expect(figures.length).toBeGreaterThan(20);
      for (const f of figures) expect({ key: f.key, value: f.value }).toEqual({ key: f.key, value: valueAt(r, f.key) });
      // what is shown is the value in its unit, not another figure's
      const shown = figures.find((f) => f.key === 'totals.logicalBytes')!;
      const [num, unit] = shown.text.split(' ');
      expect(Number(num) * 1024 ** ['B', 'KiB', 'MiB', 'GiB'].indexOf(unit!)).toBeCloseTo(r.totals.logicalBytes, -(String(r.totals.logicalBytes).length - 2));

      const charts = await tab.$$eval('svg', (svgs) =>
        svgs.map((s) => ({
          label: s.getAttribute('aria-label') ?? '',
          lines: [...s.querySelectorAll('polyline')].map((p) => {
            const b = (p as SVGGraphicsElement).getBBox();
            return { series: p.getAttribute('data-series'), points: p.getAttribute('points'), width: b.width, height: b.height };
          }),
          xticks: [...s.querySelectorAll('text.xtick')].map((t) => t.textContent),
          yticks: [...s.querySelectorAll('text.ytick')].map((t) => t.textContent ?? ''),
          legend: s.nextElementSibling?.querySelectorAll('li').length ?? 0,
        })),
      );
      expect(charts.map((c) => c.label)).toEqual(['node disk as tags are added, uncompressed', 'registry as tags are added, compressed']);
      expect(charts.map((c) => c.lines.map((l) => l.series))).toEqual([
        ['perTaskBytes', 'layerSharedBytes', 'uniqueContentBytes'],
        ['imageRegistryBytes', 'registryBytes'],
      ]);
      for (const c of charts) {
        // every legend entry draws a line of its own, a line the browser laid out
        expect(c.legend).toBe(c.lines.length);
        expect(new Set(c.lines.map((l) => l.points)).size).toBe(c.lines.length);
        for (const l of c.lines) expect(l.width).toBeGreaterThan(100);
        // the x axis counts the tags; y ticks are round figures of one unit
        expect(c.xticks[0]).toBe('1');
        expect(c.xticks.at(-1)).toBe(String(tags.length));
        expect(c.yticks.length).toBeGreaterThanOrEqual(3);
        for (const y of c.yticks) expect(y).toMatch(/^\d+(\.5)? (B|KiB|MiB|GiB)$/);
      }

      const flagged = await tab.$$eval('tr.bad td:first-child', (tds) => tds.map((t) => t.textContent));
      expect(flagged).toEqual(['u/d']);
      expect(await tab.textContent('body')).toContain('Tags that would not pull (1)');

      const shot = resolve('logs/test-artifacts/audit-report.png');
      mkdirSync(resolve('logs/test-artifacts'), { recursive: true });
      await tab.screenshot({ path: shot, fullPage: true });
      expect(readFileSync(shot).subarray(1, 4).toString()).toBe('PNG');
    } finally {
      await browser.close();
    }
  }, 120_000);
});
