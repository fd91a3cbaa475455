/**
 * `audit --html FILE`: the audit as one self-contained HTML page (inline CSS and SVG, no script,
 * nothing fetched), readable offline and attachable to a report: totals, a table per ref, and a
 * chart of cumulative storage as refs are added.
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
  return `${u === 0 ? v.toFixed(0) : v.toFixed(v >= 100 ? 0 : 1)} ${units[u]}`;
}

const SERIES: Array<{ key: 'perTaskBytes' | 'imageRegistryBytes' | 'layerSharedBytes' | 'registryBytes'; label: string; color: string }> = [
  { key: 'perTaskBytes', label: 'per-task images (uncompressed, nothing shared)', color: '#c0392b' },
  { key: 'layerSharedBytes', label: 'layer-shared store (identical layers once, uncompressed)', color: '#e67e22' },
  { key: 'imageRegistryBytes', label: 'image registry (distinct layers, compressed)', color: '#8e44ad' },
  { key: 'registryBytes', label: 'minisandbox registry (files once, packed)', color: '#27ae60' },
];

/** Cumulative storage as refs are added: one polyline per series, linear axes. */
export function chartSvg(points: AuditReport['cumulative'], width = 760, height = 320): string {
  const pad = { l: 70, r: 16, t: 16, b: 36 };
  const w = width - pad.l - pad.r;
  const h = height - pad.t - pad.b;
  const max = Math.max(1, ...points.flatMap((p) => SERIES.map((s) => p[s.key])));
  const n = points.length;
  const x = (i: number): number => pad.l + (n <= 1 ? w : (i / (n - 1)) * w);
  const y = (v: number): number => pad.t + h - (v / max) * h;
  const parts: string[] = [];
  parts.push(
    `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" role="img" aria-label="cumulative storage">`,
  );
  for (let k = 0; k <= 4; k++) {
    const v = (max * k) / 4;
    parts.push(`<line x1="${pad.l}" x2="${pad.l + w}" y1="${y(v).toFixed(1)}" y2="${y(v).toFixed(1)}" stroke="#ddd"/>`);
    parts.push(`<text x="${pad.l - 6}" y="${(y(v) + 4).toFixed(1)}" text-anchor="end" font-size="11">${esc(formatSize(v))}</text>`);
  }
  parts.push(`<text x="${pad.l + w / 2}" y="${height - 6}" text-anchor="middle" font-size="11">refs added (${n})</text>`);
  for (const s of SERIES) {
    const pts = points.map((p, i) => `${x(i).toFixed(1)},${y(p[s.key]).toFixed(1)}`);
    if (n === 1) pts.unshift(`${pad.l},${y(points[0]![s.key]).toFixed(1)}`);
    parts.push(`<polyline fill="none" stroke="${s.color}" stroke-width="2" points="${pts.join(' ')}"><title>${esc(s.label)}</title></polyline>`);
  }
  parts.push('</svg>');
  return parts.join('');
}

export function auditHtml(r: AuditReport, now = new Date()): string {
  const t = r.totals;
  const last = r.cumulative.at(-1);
  const pct = (a: number, b: number): string => (b === 0 ? '–' : `${((a / b) * 100).toFixed(2)}%`);
  const hasImages = r.refs.some((x) => x.imageCompressedBytes !== undefined);
  const rows = r.refs
    .map(
      (x) =>
        `<tr><td>${esc(x.ref)}</td><td>${x.layers}</td><td>${x.files}</td><td>${formatSize(x.logicalBytes)}</td>` +
        (hasImages
          ? `<td>${x.imageCompressedBytes === undefined ? '' : formatSize(x.imageCompressedBytes)}</td>` +
            `<td>${x.imageBytes === undefined ? '' : formatSize(x.imageBytes)}</td>`
          : '') +
        '</tr>',
    )
    .join('\n');
  const legend = SERIES.map((s) => `<li><span style="background:${s.color}"></span>${esc(s.label)}${last ? `: ${formatSize(last[s.key])}` : ''}</li>`).join('');
  return `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>minisandbox audit: ${esc(r.registry)}</title>
<style>
body{font:14px/1.4 system-ui,sans-serif;margin:2em;color:#222;max-width:1000px}
table{border-collapse:collapse;margin:1em 0}td,th{padding:3px 10px;border-bottom:1px solid #eee;text-align:right}
td:first-child,th:first-child{text-align:left}th{background:#f6f6f6}
ul.legend{list-style:none;padding:0}ul.legend span{display:inline-block;width:12px;height:12px;margin-right:6px;vertical-align:middle}
.big{font-size:1.3em}
</style></head><body>
<h1>Storage audit</h1>
<p>Registry <code>${esc(r.registry)}</code>, ${t.refs} refs, ${t.distinctLayers} distinct layers, ${t.distinctObjects} distinct files;
written ${esc(now.toISOString())}.</p>
<table>
<tr><th>what</th><th>bytes</th><th>minisandbox registry is</th></tr>
<tr><td>one image per ref (uncompressed)</td><td>${formatSize(t.logicalBytes)}</td><td>${pct(t.registryBytes, t.logicalBytes)}</td></tr>
<tr><td>identical layers shared (uncompressed)</td><td>${formatSize(t.dockerStyleBytes)}</td><td>${pct(t.registryBytes, t.dockerStyleBytes)}</td></tr>
${
  hasImages
    ? `<tr><td>source images' distinct layers, compressed (image registry)</td>
<td>${formatSize(t.imageCompressedBytes)}</td><td>${pct(t.registryBytes, t.imageCompressedBytes)}</td></tr>
<tr><td>source images' distinct layers, uncompressed (container engine)</td>
<td>${formatSize(t.imageBytes)}</td><td>${pct(t.registryBytes, t.imageBytes)}</td></tr>`
    : ''
}
<tr><td>distinct file contents (uncompressed)</td><td>${formatSize(t.uniqueContentBytes)}</td><td>${pct(t.registryBytes, t.uniqueContentBytes)}</td></tr>
<tr class="big"><td>minisandbox registry (compressed packs, manifests, configs)</td><td>${formatSize(t.registryBytes)}</td><td></td></tr>
</table>
<h2>Cumulative storage as refs are added</h2>
${chartSvg(r.cumulative)}
<ul class="legend">${legend}</ul>
<h2>Refs</h2>
<table><tr><th>ref</th><th>layers</th><th>files</th><th>image (uncompressed)</th>${
    hasImages ? '<th>source image compressed</th><th>source ' + 'image uncompressed</th>' : ''
  }</tr>
${rows}
</table>
</body></html>
`;
}
