/**
 * `audit --html FILE`: the audit as one self-contained HTML page (inline CSS and SVG, no script,
 * nothing fetched), readable offline and attachable to a report. It compares like with like: a
 * node's disk (uncompressed) against per-task images on disk, and the registry (compressed)
 * against the source images' registry (compressed); per-dataset totals and what each added
 * instance costs; tags a pull would fail on, flagged. Every figure the page shows carries its
 * `audit --json` key and exact value (`data-key`, `data-value`), so a test can hold one to the other.
 */
import type { AuditReport } from './audit.js';

const esc = (s: string): string => s.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);

export function formatSize(n: number): string {
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let v = n;
  let u = 0;
  while (v >= 1024 && u < units.length - 1) {
    v /= 1024;
    u++;
  }
  return `${u === 0 ? v.toFixed(0) : v.toFixed(v >= 100 ? 0 : 1).replace(/\.0$/, '')} ${units[u]}`;
}

/** A link speed to turn bytes into fetch times (stated on the page): 1 Gbit/s. */
const LINK_BYTES_PER_SECOND = 125_000_000;

type PointKey = 'perTaskBytes' | 'layerSharedBytes' | 'uniqueContentBytes' | 'imageRegistryBytes' | 'registryBytes';
export interface Series {
  key: PointKey;
  label: string;
  color: string;
}

/** Uncompressed, what a node's disk holds: one chart. */
export const DISK_SERIES: Series[] = [
  { key: 'perTaskBytes', label: 'per-task images (one per ref, nothing shared)', color: '#c0392b' },
  { key: 'layerSharedBytes', label: 'layer-shared store (identical layers once, as Docker/OCI)', color: '#e67e22' },
  { key: 'uniqueContentBytes', label: 'minisandbox node store (each file content once)', color: '#27ae60' },
];

/** Compressed, what a registry holds and a node fetches: the other. */
export const REGISTRY_SERIES: Series[] = [
  { key: 'imageRegistryBytes', label: "image registry (the source images' distinct layers)", color: '#8e44ad' },
  { key: 'registryBytes', label: 'minisandbox registry (the blobs the tags reach)', color: '#2471a3' },
];

/** 1, 2, 5, 10, 20, ... : the smallest such step that cuts `span` into at most `most` parts. */
function niceStep(span: number, most: number): number {
  const raw = span / most;
  const p = 10 ** Math.floor(Math.log10(raw));
  for (const m of [1, 2, 5, 10]) if (m * p >= raw) return m * p;
  return 10 * p;
}

interface Scale {
  y: (v: number) => number;
  ticks: Array<{ at: number; label: string }>;
  log: boolean;
}

const UNITS = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];

/**
 * A byte axis from 0 (linear) or from a power of ten of a binary unit (log, where the values span
 * more than 50x): ticks at round numbers of one unit (0, 50, 100 MiB; 1, 10, 100 KiB), never odd values.
 */
export function byteScale(values: number[], top: number, height: number): Scale {
  const positive = values.filter((v) => v > 0);
  const max = Math.max(1, ...positive);
  const min = Math.min(max, ...positive);
  if (max / min > 50) {
    const ticks: number[] = [];
    for (let unit = 1; unit <= max * 1024; unit *= 1024) for (const m of [1, 10, 100]) ticks.push(unit * m);
    const lo = ticks.filter((t) => t <= min).at(-1) ?? 1;
    const hi = ticks.find((t) => t >= max) ?? max;
    const [a, b] = [Math.log(lo), Math.log(hi)];
    return {
      log: true,
      ticks: ticks.filter((t) => t >= lo && t <= hi).map((t) => ({ at: t, label: formatSize(t) })),
      y: (v) => top + height - ((Math.log(Math.max(v, lo)) - a) / (b - a)) * height,
    };
  }
  // the largest unit the maximum holds at least twice (so a step is never a fraction below a half)
  let u = 0;
  while (u < UNITS.length - 1 && max / 1024 ** (u + 1) >= 2) u++;
  const unit = 1024 ** u;
  const step = Math.max(0.5, niceStep(max / unit, 5));
  const hi = Math.ceil(max / unit / step) * step;
  const ticks: Scale['ticks'] = [];
  for (let k = 0; k * step <= hi + step / 2; k++) ticks.push({ at: k * step * unit, label: `${+(k * step).toFixed(1)} ${UNITS[u]}` });
  return { log: false, ticks, y: (v) => top + height - (v / (hi * unit)) * height };
}

/** Cumulative storage as refs are added: one polyline per series, labelled axes. */
export function chartSvg(points: AuditReport['cumulative'], series: Series[], title: string, width = 760, height = 340): string {
  const pad = { l: 80, r: 16, t: 16, b: 48 };
  const w = width - pad.l - pad.r;
  const h = height - pad.t - pad.b;
  const n = points.length;
  const scale = byteScale(
    points.flatMap((p) => series.map((s) => p[s.key])),
    pad.t,
    h,
  );
  // ref k (1-based) at its place; a single ref in the middle
  const x = (k: number): number => pad.l + (n <= 1 ? w / 2 : ((k - 1) / (n - 1)) * w);
  const parts: string[] = [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" role="img" ` + `aria-label="${esc(title)}">`,
  ];
  for (const t of scale.ticks) {
    const y = scale.y(t.at).toFixed(1);
    parts.push(`<line x1="${pad.l}" x2="${pad.l + w}" y1="${y}" y2="${y}" stroke="#ddd"/>`);
    parts.push(`<text class="ytick" x="${pad.l - 6}" y="${(Number(y) + 4).toFixed(1)}" text-anchor="end" font-size="11">${esc(t.label)}</text>`);
  }
  const xStep = Math.max(1, niceStep(Math.max(1, n - 1), 8));
  const xTicks = n <= 1 ? [1] : [1, ...Array.from({ length: Math.floor(n / xStep) }, (_, i) => (i + 1) * xStep).filter((k) => k > 1 && k <= n)];
  if (xTicks.at(-1) !== n) xTicks.push(n);
  for (const k of xTicks) {
    const xs = x(k).toFixed(1);
    parts.push(`<line x1="${xs}" x2="${xs}" y1="${pad.t + h}" y2="${pad.t + h + 4}" stroke="#888"/>`);
    parts.push(`<text class="xtick" x="${xs}" y="${pad.t + h + 16}" text-anchor="middle" font-size="11">${k}</text>`);
  }
  parts.push(`<line x1="${pad.l}" x2="${pad.l + w}" y1="${pad.t + h}" y2="${pad.t + h}" stroke="#888"/>`);
  parts.push(
    `<text x="${pad.l + w / 2}" y="${height - 6}" text-anchor="middle" font-size="12">refs added, in the order listed` +
      `${scale.log ? ' (bytes on a log scale)' : ''}</text>`,
  );
  for (const s of series) {
    // a series starts where it has something (an image registry only from the first imported ref)
    const pts = points.flatMap((p, i) => (p[s.key] > 0 || !scale.log ? [`${x(i + 1).toFixed(1)},${scale.y(p[s.key]).toFixed(1)}`] : []));
    if (pts.length === 0) continue;
    if (pts.length === 1) parts.push(`<circle cx="${pts[0]!.split(',')[0]}" cy="${pts[0]!.split(',')[1]}" r="4" fill="${s.color}"/>`);
    parts.push(
      `<polyline data-series="${s.key}" fill="none" stroke="${s.color}" stroke-width="2" points="${pts.join(' ')}">` +
        `<title>${esc(s.label)}</title></polyline>`,
    );
  }
  parts.push('</svg>');
  return parts.join('');
}

/** A figure as shown, with the JSON key and value it shows. */
const fig = (key: string, bytes: number): string => `<span data-key="${esc(key)}" data-value="${bytes}">${formatSize(bytes)}</span>`;
/** What minisandbox saves against a baseline, said as more where it is more (tiny or incompressible sets). */
const saved = (key: string, baseline: number, ours: number): string =>
  ours <= baseline
    ? `<span data-key="${key}" data-value="${baseline - ours}">${formatSize(baseline - ours)}</span> (${times(baseline, ours)} smaller)`
    : `<span class="flag" data-key="${key}" data-value="${baseline - ours}">${formatSize(ours - baseline)} more</span> ` + `(${times(ours, baseline)} larger)`;
const times = (a: number, b: number): string => (b === 0 ? '–' : `${(a / b).toFixed(a / b >= 10 ? 0 : 1)}x`);
const seconds = (bytes: number): string => `${(bytes / LINK_BYTES_PER_SECOND).toFixed(bytes >= 10 * LINK_BYTES_PER_SECOND ? 0 : 1)} s`;

export function auditHtml(r: AuditReport, now = new Date()): string {
  const t = r.totals;
  const last = r.cumulative.at(-1);
  const allImages = t.imageRefs > 0 && t.imageRefs === t.refs;
  const hasImages = t.imageRefs > 0;
  const registrySeries = REGISTRY_SERIES.filter((s) => s.key !== 'imageRegistryBytes' || hasImages);
  const legend = (series: Series[]): string =>
    series
      .map(
        (s) =>
          `<li><span class="swatch" style="background:${s.color}"></span>${esc(s.label)}${last ? `: ${fig(`cumulative[-1].${s.key}`, last[s.key])}` : ''}</li>`,
      )
      .join('');
  const refRows = r.refs
    .map(
      (x, i) =>
        `<tr${x.pullable ? '' : ' class="bad"'}><td>${esc(x.ref)}</td><td>${x.layers}</td><td>${x.files}</td>` +
        `<td>${fig(`refs[${i}].logicalBytes`, x.logicalBytes)}</td>` +
        (hasImages
          ? `<td>${x.imageCompressedBytes === undefined ? '' : fig(`refs[${i}].imageCompressedBytes`, x.imageCompressedBytes)}</td>` +
            `<td>${x.imageBytes === undefined ? '' : fig(`refs[${i}].imageBytes`, x.imageBytes)}</td>`
          : '') +
        `<td>${x.pullable ? 'yes' : `<strong>no</strong>: ${esc(x.problem ?? '')}`}</td></tr>`,
    )
    .join('\n');
  const datasetRows = r.datasets
    .map(
      (d, i) =>
        `<tr><td>${esc(d.dataset === '' ? '(no dataset)' : d.dataset)}</td><td>${d.refs}</td>` +
        `<td>${fig(`datasets[${i}].perTaskBytes`, d.perTaskBytes)}</td><td>${fig(`datasets[${i}].uniqueContentBytes`, d.uniqueContentBytes)}</td>` +
        `<td>${fig(`datasets[${i}].registryBytes`, d.registryBytes)}</td>` +
        (d.refs > 1
          ? `<td>${fig(`datasets[${i}].marginalPerTaskBytes`, d.marginalPerTaskBytes)}</td>` +
            `<td>${fig(`datasets[${i}].marginalRegistryBytes`, d.marginalRegistryBytes)}</td>`
          : '<td colspan="2">one ref</td>') +
        '</tr>',
    )
    .join('\n');
  const unpullable = r.refs.filter((x) => !x.pullable);
  const fetchSaved =
    t.reachedRegistryBytes <= t.imageCompressedBytes
      ? seconds(t.imageCompressedBytes - t.reachedRegistryBytes)
      : `${seconds(t.reachedRegistryBytes - t.imageCompressedBytes)} more`;
  const compressedRow = allImages
    ? `<tr><td>compressed: what a registry holds and a fresh node fetches</td>
<td>image registry ${fig('totals.imageCompressedBytes', t.imageCompressedBytes)}</td>
<td>minisandbox registry ${fig('totals.reachedRegistryBytes', t.reachedRegistryBytes)}</td>
<td>${saved('saved.compressed', t.imageCompressedBytes, t.reachedRegistryBytes)}</td></tr>
<tr><td>time to fetch every tag at 1 Gbit/s</td><td>${seconds(t.imageCompressedBytes)}</td><td>${seconds(t.reachedRegistryBytes)}</td>
<td>${fetchSaved}</td></tr>`
    : `<tr><td>compressed: the minisandbox registry</td><td colspan="3">${fig('totals.reachedRegistryBytes', t.reachedRegistryBytes)} the tags reach
(a compressed image baseline needs every ref imported from an image: ${t.imageRefs} of ${t.refs} are)</td></tr>`;
  return `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>minisandbox audit: ${esc(r.registry)}</title>
<style>
body{font:14px/1.4 system-ui,sans-serif;margin:2em;color:#222;max-width:1000px}
table{border-collapse:collapse;margin:1em 0}td,th{padding:3px 10px;border-bottom:1px solid #eee;text-align:right}
td:first-child,th:first-child{text-align:left}th{background:#f6f6f6}
ul.legend{list-style:none;padding:0}ul.legend span.swatch{display:inline-block;width:12px;height:12px;margin-right:6px;vertical-align:middle}
tr.bad td{background:#fdecea}.flag{color:#a93226}.note{color:#666}
</style></head><body>
<h1>Storage audit</h1>
<p>Registry <code>${esc(r.registry)}</code>: <span data-key="totals.refs" data-value="${t.refs}">${t.refs}</span> tags,
${t.distinctLayers} distinct layers, ${t.distinctObjects} distinct files; written ${esc(now.toISOString())}.</p>
<h2>Saved against one image per task</h2>
<table>
<tr><th>like with like</th><th>per-task images</th><th>minisandbox</th><th>saved</th></tr>
<tr><td>uncompressed: what a node's disk holds for every tag</td>
<td>${fig('totals.logicalBytes', t.logicalBytes)}</td><td>${fig('totals.uniqueContentBytes', t.uniqueContentBytes)}</td>
<td>${saved('saved.uncompressed', t.logicalBytes, t.uniqueContentBytes)}</td></tr>
<tr><td>uncompressed, identical layers shared (Docker/OCI)</td>
<td>${fig('totals.dockerStyleBytes', t.dockerStyleBytes)}</td><td>${formatSize(t.uniqueContentBytes)}</td>
<td>${saved('saved.layerShared', t.dockerStyleBytes, t.uniqueContentBytes)}</td></tr>
${compressedRow}
</table>
<p class="note">The registry holds ${fig('totals.registryBytes', t.registryBytes)} in all: the tags' blobs, the build cache's and
unreached ones (until <code>gc</code>).</p>
${
  unpullable.length > 0
    ? `<h2 class="flag">Tags that would not pull (<span data-key="totals.unpullableRefs" data-value="${t.unpullableRefs}">${t.unpullableRefs}</span>)</h2>
<ul>${unpullable.map((x) => `<li><code>${esc(x.ref)}</code>: ${esc(x.problem ?? 'unreadable')}</li>`).join('')}</ul>
<p>Push them again, or run <code>minisandbox verify</code> to list what is missing.</p>`
    : '<p>Every tag reaches only blobs the registry has (<code>minisandbox verify</code> checks their content too).</p>'
}
<h2>Per dataset</h2>
<table>
<tr><th>dataset</th><th>tags</th><th>per-task images</th><th>distinct contents</th><th>registry (compressed)</th>
<th>each added instance: image</th><th>each added instance: registry</th></tr>
${datasetRows}
</table>
<p class="note">An added instance's cost is the median, over a dataset's tags after its first, of the bytes it adds:
a whole image per task, against the registry blobs no earlier tag of the dataset reached.</p>
<h2>Node disk as tags are added (uncompressed)</h2>
${chartSvg(r.cumulative, DISK_SERIES, 'node disk as tags are added, uncompressed')}
<ul class="legend">${legend(DISK_SERIES)}</ul>
<h2>Registry as tags are added (compressed)</h2>
${chartSvg(r.cumulative, registrySeries, 'registry as tags are added, compressed')}
<ul class="legend">${legend(registrySeries)}</ul>
${hasImages && !allImages ? `<p class="note">The image registry line counts the ${t.imageRefs} tags imported from images only.</p>` : ''}
<h2>Tags</h2>
<table><tr><th>tag</th><th>layers</th><th>files</th><th>image (uncompressed)</th>${
    hasImages ? '<th>source image, compressed</th><th>source image, uncompressed</th>' : ''
  }<th>pulls</th></tr>
${refRows}
</table>
${
  r.cacheRefs.length > 0
    ? `<p class="note">${r.cacheRefs.length} build cache entries (<code>_cache/...</code>) are listed by
<code>--all</code> and counted as no image.</p>`
    : ''
}
</body></html>
`;
}
