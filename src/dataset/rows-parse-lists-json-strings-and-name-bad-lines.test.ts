import { mkdtemp, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { InvalidInputError } from '../errors.js';
import { loadDataset } from './read.js';

const C = 'a'.repeat(40);
const row = (extra: Record<string, unknown>): string =>
  JSON.stringify({ instance_id: 'o__r-1', repo: 'o/r', base_commit: C, version: '1.0', patch: 'p', test_patch: 't', ...extra });

async function dataset(name: string, text: string): Promise<string> {
  const f = join(await mkdtemp(join(tmpdir(), 'ds-')), name);
  await writeFile(f, text);
  return f;
}

describe('dataset reading', () => {
  it('parses test lists given as lists or as JSON strings, and keeps unknown fields', async () => {
    const f = await dataset(
      'd.jsonl',
      [row({ FAIL_TO_PASS: ['t::a'], PASS_TO_PASS: '["t::b", "t::c"]', hints_text: 'h' }), '', row({ instance_id: 'o__r-2', FAIL_TO_PASS: '[]' })].join('\n') +
        '\n',
    );
    const rows = await loadDataset(f);
    expect(rows.map((r) => r.row.instance_id)).toEqual(['o__r-1', 'o__r-2']);
    expect(rows[0]?.row).toMatchObject({ FAIL_TO_PASS: ['t::a'], PASS_TO_PASS: ['t::b', 't::c'], hints_text: 'h' });
    expect(rows[1]?.row).toMatchObject({ FAIL_TO_PASS: [], PASS_TO_PASS: [] });
    expect(rows[1]?.where).toBe(`${f}:3`);
  });

  it('names the file and line of malformed JSON and of a bad field', async () => {
    const bad = await dataset('d.jsonl', `${row({})}\n{"instance_id": \n`);
    await expect(loadDataset(bad)).rejects.toThrow(`${bad}:2: not valid JSON`);
    const field = await dataset('d.jsonl', `${row({})}\n${row({ instance_id: 'x', FAIL_TO_PASS: '["a", 1]' })}\n`);
    await expect(loadDataset(field)).rejects.toThrow(`${field}:2: FAIL_TO_PASS: `);
    // a union's "Invalid input" says what it takes
    const number = await dataset('d.jsonl', row({ FAIL_TO_PASS: 42 }));
    await expect(loadDataset(number)).rejects.toThrow(`${number}:1: FAIL_TO_PASS: expected array or string, received number`);
    const version = await dataset('d.jsonl', row({ version: 3.0 }));
    await expect(loadDataset(version)).rejects.toThrow(`${version}:1: version: expected string, received number`);
    const commit = await dataset('d.jsonl', row({ base_commit: 'main' }));
    await expect(loadDataset(commit)).rejects.toThrow(/:1: base_commit: expected a full commit id/);
  });

  it('rejects duplicate instance ids naming both lines', async () => {
    const f = await dataset('d.jsonl', `${row({})}\n${row({})}\n`);
    const err = await loadDataset(f).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(InvalidInputError);
    expect((err as Error).message).toBe(`${f}:2: duplicate instance_id o__r-1 (first at ${f}:1)`);
  });

  it('accepts a .json array, naming the index of a bad row', async () => {
    const ok = await dataset('d.json', `[${row({})}, ${row({ instance_id: 'o__r-2' })}]`);
    expect((await loadDataset(ok)).map((r) => r.where)).toEqual([`${ok}[0]`, `${ok}[1]`]);
    const bad = await dataset('d.json', `[${row({})}, {"repo": "o/r"}]`);
    await expect(loadDataset(bad)).rejects.toThrow(`${bad}[1]: instance_id: `);
  });
});
