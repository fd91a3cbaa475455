/**
 * How requests take from the server's memory budget (util/byte-budget.ts): an account per request
 * given back when its response is done (or its client gone), JSON bodies counted as they arrive,
 * the per-request ceiling on `max_output`, and the refusal a request past the budget gets (429
 * with a Retry-After, in the server's error shape), so that the server refuses work it cannot
 * hold instead of growing until the kernel kills it.
 */
import { Transform, type Readable } from 'node:stream';
import type { FastifyInstance, FastifyReply } from 'fastify';
import { DEFAULT_MAX_OUTPUT_BYTES } from '../sandbox/outcome.js';
import type { BudgetAccount, ByteBudget, ByteGrant } from '../util/byte-budget.js';
import { FieldError } from './http.js';
import { RetryLaterError } from './manager.js';

/** Bytes of a body or a read a request holds without asking the budget: small requests are never refused. */
export const REQUEST_FLOOR_BYTES = 64 << 10;

/**
 * What holding a byte costs, counted against the budget: captured output is held as bytes, then
 * as text (one or two bytes a character) while it is answered; a JSON body as bytes, text and
 * its parsed value.
 */
export const OUTPUT_COPIES = 2;
export const JSON_BODY_COPIES = 3;

/** The grant a request's output capture takes from: its account, at OUTPUT_COPIES a byte. */
export function outputGrant(account: BudgetAccount): ByteGrant {
  return account.weighted(OUTPUT_COPIES);
}

export class MemoryBudgetError extends RetryLaterError {
  constructor(what: string, budget: ByteBudget) {
    super(
      `the server cannot hold ${what} now: requests in flight hold its memory budget of ${budget.capacity} bytes`,
      'retry after the Retry-After; serve --memory-budget raises the budget',
      1,
    );
  }
}

/** An account of the budget given back when the response has been sent or its client went away. */
export function replyAccount(budget: ByteBudget, reply: FastifyReply): BudgetAccount {
  const a = budget.account();
  reply.raw.once('close', () => a.release());
  return a;
}

/** The output cap a request gets: what it asked for, at most the server's ceiling (422 past it, naming the field). */
export function outputCap(asked: number | undefined, ceiling: number): number {
  if (asked !== undefined && asked > ceiling)
    throw new FieldError(
      'max_output',
      `body field max_output: at most ${ceiling} bytes per stream on this server, asked for ${asked}`,
      "ask for less (output past max_output is dropped and stdout_truncated says so), or raise serve's --max-output",
    );
  return asked ?? Math.min(DEFAULT_MAX_OUTPUT_BYTES, ceiling);
}

/**
 * `src` as it arrives, each chunk past the first REQUEST_FLOOR_BYTES taken from `grant`; a
 * chunk the budget refuses fails the stream with a MemoryBudgetError (the rest of `src` drained).
 */
export function countedAgainst(src: Readable, grant: ByteGrant, budget: ByteBudget, what: string): Transform {
  let seen = 0;
  const t = new Transform({
    transform(chunk: Buffer, _enc, cb) {
      const before = seen;
      seen += chunk.length;
      const asked = seen - Math.max(before, REQUEST_FLOOR_BYTES);
      if (asked > 0 && !grant.take(asked)) {
        // the rest is read and dropped (holding nothing), so the client gets to read its answer
        src.unpipe(t);
        src.resume();
        return cb(new MemoryBudgetError(what, budget));
      }
      cb(null, chunk);
    },
  });
  src.on('error', (e) => t.destroy(e));
  return src.pipe(t);
}

/**
 * JSON bodies are held whole while they are parsed, and their parsed form while the request
 * runs: their bytes come from the budget until the response is done. A body past it is refused
 * (429) as it arrives; the rest of it is not read.
 */
export function budgetJsonBodies(app: FastifyInstance, budget: ByteBudget): void {
  app.addHook('preParsing', async (req, reply, payload) => {
    const type = req.headers['content-type'];
    if (typeof type !== 'string' || !type.toLowerCase().startsWith('application/json')) return payload;
    return countedAgainst(payload, replyAccount(budget, reply).weighted(JSON_BODY_COPIES), budget, 'this request body');
  });
}

/**
 * Reads `src` whole into memory, taking each chunk past the first REQUEST_FLOOR_BYTES from
 * `account`; more than `limit` bytes, or a chunk the budget refuses, stops the read (and destroys
 * `src`) with the error `tooLarge` or a MemoryBudgetError.
 */
export async function collectWithin(
  src: Readable,
  opts: { limit: number; account: BudgetAccount; budget: ByteBudget; what: string; tooLarge: () => Error },
): Promise<Buffer[]> {
  const chunks: Buffer[] = [];
  let seen = 0;
  for await (const c of src as AsyncIterable<Buffer>) {
    const before = seen;
    seen += c.length;
    if (seen > opts.limit) {
      src.destroy();
      throw opts.tooLarge();
    }
    const asked = seen - Math.max(before, REQUEST_FLOOR_BYTES);
    if (asked > 0 && !opts.account.take(asked)) {
      src.destroy();
      throw new MemoryBudgetError(opts.what, opts.budget);
    }
    chunks.push(c);
  }
  return chunks;
}
