/**
 * The request log's default sink: lines logged in one turn of the event loop reach the output in
 * one write, in order, each ending in a newline; flush writes what is gathered at once (shutdown).
 */
import { describe, expect, it } from 'vitest';
import { batchedLines } from './log-sink.js';

describe('the request log sink', () => {
  it('gathers the lines of one event-loop turn into one write, in order', async () => {
    const writes: string[] = [];
    const sink = batchedLines((t) => writes.push(t));
    sink.write('{"a":1}');
    sink.write('{"a":2}');
    sink.write('{"a":3}');
    expect(writes).toEqual([]);
    await new Promise((r) => setImmediate(r));
    expect(writes).toEqual(['{"a":1}\n{"a":2}\n{"a":3}\n']);
    sink.write('{"b":1}');
    await new Promise((r) => setImmediate(r));
    expect(writes).toEqual(['{"a":1}\n{"a":2}\n{"a":3}\n', '{"b":1}\n']);
  });

  it('flush writes the gathered lines at once, and nothing twice', async () => {
    const writes: string[] = [];
    const sink = batchedLines((t) => writes.push(t));
    sink.write('x');
    sink.flush();
    expect(writes).toEqual(['x\n']);
    await new Promise((r) => setImmediate(r));
    sink.flush();
    expect(writes).toEqual(['x\n']);
  });
});
