/** Shared helpers for the layer tests: real shell commands, real temporary trees. */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { captureLayer, type CaptureOptions, type CaptureResult, type CapturedObject } from '../../src/layer/capture.js';
import { readManifest } from '../../src/layer/manifest-read.js';
import type { Entry } from '../../src/layer/manifest.js';

export function sh(script: string, cwd?: string): string {
  return execFileSync('bash', ['-euo', 'pipefail', '-c', script], { cwd, encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
}

export function tempDir(prefix: string): { dir: string; cleanup: () => void } {
  const dir = mkdtempSync(join(tmpdir(), `ms-${prefix}-`));
  return { dir, cleanup: () => rmSync(dir, { recursive: true, force: true }) };
}

export interface Captured extends CaptureResult {
  list: Entry[];
  byPath: Map<string, Entry>;
  objectsSeen: CapturedObject[];
  warnings: string[];
}

/** Captures `root`, then reads the manifest back through the validating reader. */
export async function captureAndRead(root: string, manifestPath: string, opts: Partial<CaptureOptions> = {}): Promise<Captured> {
  const objectsSeen: CapturedObject[] = [];
  const warnings: string[] = [];
  const r = await captureLayer(root, {
    manifestPath,
    onObject: (o) => {
      objectsSeen.push(o);
    },
    onWarning: (w) => warnings.push(w),
    ...opts,
  });
  const list: Entry[] = [];
  for await (const e of readManifest(manifestPath, manifestPath)) list.push(e);
  return { ...r, list, byPath: new Map(list.map((e) => [e.path, e])), objectsSeen, warnings };
}
