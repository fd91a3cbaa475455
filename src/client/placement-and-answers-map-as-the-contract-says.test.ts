/**
 * The pure parts of the client: the pool's placement order (laid out first, then the most layers,
 * then the most free slots, ties at random, full nodes never), the error class each answer maps
 * to (by the server's code before its status; 410 NODE_RESTARTED a lost node), and the node a
 * sandbox id names. Against real nodes: pool-over-serve-processes-places-and-names-lost-nodes.test.ts.
 */
import { describe, expect, it } from 'vitest';
import { rng } from '../../test/helpers/rng.js';
import {
  CapacityError,
  GoneError,
  NodeLostError,
  NotConfiguredError,
  nodeOf,
  placementOrder,
  RemoteError,
  RemoteInvalidInputError,
  RemoteNotFoundError,
  RemoteServerError,
} from './index.js';
import { errorFromAnswer } from './errors.js';

describe('placement order', () => {
  it('puts the node that holds the env first, then the most layers, then the most free; never a full one', () => {
    const order = placementOrder(
      [
        { node: 'cold-roomy', cap: { free: 9, live: 0, max: 9 }, hold: undefined },
        { node: 'warm', cap: { free: 1, live: 7, max: 8 }, hold: { present: true, layers_present: 3, layers: 3 } },
        { node: 'two-thirds', cap: { free: 5, live: 3, max: 8 }, hold: { present: false, layers_present: 2, layers: 3 } },
        { node: 'warm-but-full', cap: { free: 0, live: 8, max: 8 }, hold: { present: true, layers_present: 3, layers: 3 } },
      ],
      Math.random,
    );
    expect(order).toEqual(['warm', 'two-thirds', 'cold-roomy']);
  });

  it('breaks ties at random', () => {
    const random = rng(7);
    const tied = [
      { node: 'a', cap: { free: 2, live: 0, max: 2 }, hold: undefined },
      { node: 'b', cap: { free: 2, live: 0, max: 2 }, hold: undefined },
    ];
    const firsts = new Set(Array.from({ length: 20 }, () => placementOrder(tied, random)[0]));
    expect(firsts).toEqual(new Set(['a', 'b']));
  });
});

describe('answers', () => {
  const err = (status: number, code: string, extra: Record<string, unknown> = {}) =>
    errorFromAnswer(status, { error: { code, message: `m ${code}`, hint: 'h', ...extra } }, status === 429 ? '3' : null, '');

  it('map to the class of their code, then of their status', () => {
    expect(err(404, 'SANDBOX_FILE')).toBeInstanceOf(RemoteNotFoundError);
    expect(err(422, 'INVALID_INPUT', { field: 'limits.memory' })).toMatchObject({ constructor: RemoteInvalidInputError, field: 'limits.memory', hint: 'h' });
    expect(err(429, 'CAPACITY')).toMatchObject({ constructor: CapacityError, retryAfterS: 3, status: 429 });
    expect(err(410, 'SANDBOX_DESTROYED')).toBeInstanceOf(GoneError);
    expect(err(501, 'NOT_CONFIGURED')).toBeInstanceOf(NotConfiguredError);
    expect(err(501, 'NOT_CONFIGURED')).toBeInstanceOf(RemoteServerError);
    // a code this client does not know keeps its class by status, and says what the server said
    expect(err(404, 'SOMETHING_NEW')).toMatchObject({ constructor: RemoteNotFoundError, code: 'INTERNAL', serverCode: 'SOMETHING_NEW' });
    expect(errorFromAnswer(502, undefined, null, '<html>bad gateway</html>')).toMatchObject({
      constructor: RemoteServerError,
      message: '<html>bad gateway</html>',
    });
    expect(err(418, 'TEAPOT')).toBeInstanceOf(RemoteError);
  });

  it('make 410 NODE_RESTARTED a lost node, naming the sandbox and its node', () => {
    const e = errorFromAnswer(
      410,
      { error: { code: 'NODE_RESTARTED', message: 'sandbox sb-mx1-0a0b0c0d.n2 was lost when node n2 restarted at 2026-01-01T00:00:00.000Z' } },
      null,
      '',
    );
    expect(e).toMatchObject({ constructor: NodeLostError, code: 'NODE_LOST', reason: 'restarted', node: 'n2', sandboxId: 'sb-mx1-0a0b0c0d.n2' });
  });

  it('read the node of a sandbox id', () => {
    expect(nodeOf('sb-mx1-0a0b0c0d.node-7')).toBe('node-7');
    expect(nodeOf('sb-mx1-0a0b0c0d')).toBeUndefined();
  });
});
