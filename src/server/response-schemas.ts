/**
 * What the native API answers, as zod schemas: the OpenAPI document's responses (openapi.ts). The
 * requests' schemas are in schemas.ts, where the routes parse with them.
 */
import { z } from 'zod';
import { EvaluationStatusSchema, InstanceReportSchema } from '../score/report.js';

export const ErrorBodySchema = z.object({
  error: z.object({
    code: z.string().describe("one of minisandbox's error codes (src/errors.ts)"),
    message: z.string(),
    hint: z.string().optional(),
    field: z.string().optional().describe('the request field that failed its schema (dotted path)'),
  }),
});

export const SandboxInfoSchema = z.object({
  id: z.string(),
  ref: z.string(),
  created_at: z.string(),
  expires_at: z.string(),
  idle_since: z.string().nullable(),
  sessions: z.array(z.string()),
  forked_from: z.string().optional(),
  /** The snapshot it was created from or last reset to. */
  snapshot: z.string().optional(),
});

export const OutcomeBodySchema = z.object({
  stdout: z.string(),
  stderr: z.string(),
  exit_code: z.number().int().nullable(),
  outcome: z.enum(['ok', 'timeout', 'oom', 'killed', 'infra_error']),
  signal: z.string().nullable(),
  stdout_truncated: z.boolean(),
  stderr_truncated: z.boolean(),
  duration_ms: z.number(),
  truncated_by: z
    .enum(['max_output', 'server_budget'])
    .optional()
    .describe("where output was truncated: what cut it, the request's max_output or the server's --memory-budget (each stream keeps its first 64 KiB)"),
  error: z.string().optional(),
});

/**
 * POST /v1/evaluate: SWE-bench's report.json object, `{"<instance_id>": report}`, whose entry also
 * says how grading went (the X-Minisandbox-Score-Status header says it too, for older clients).
 */
export const EvaluationAnswerSchema = z.record(
  z.string(),
  InstanceReportSchema.extend({
    status: EvaluationStatusSchema.describe('timeout and error: the patch could not be graded, `resolved` is no verdict'),
    error: z.string().optional().describe('why it was not graded, or did not apply'),
  }),
);
export type EvaluationAnswer = z.infer<typeof EvaluationAnswerSchema>;

export const JobStartedSchema = z.object({ job: z.string(), status: z.literal('running') });

export const JobInfoSchema = z
  .object({
    job: z.string(),
    status: z.enum(['running', 'done']),
    started_at: z.string(),
    finished_at: z.string().optional(),
    result: OutcomeBodySchema.optional(),
  })
  .describe("a finished job is kept while the sandbox's finished jobs hold at most --job-output-budget bytes of output (oldest dropped first)");

export const DirListingSchema = z.object({
  path: z.string(),
  entries: z.array(
    z.object({
      name: z.string(),
      type: z.enum(['file', 'dir', 'symlink', 'other']),
      size: z.number().int(),
      mode: z.string().describe('permission bits in octal, e.g. 644'),
      target: z.string().optional().describe("a symlink's target, as stored in the sandbox"),
    }),
  ),
});

export const CapacitySchema = z.object({
  node: z.string().nullable().describe("the server's node name (--node-name)"),
  live: z.number().int(),
  max: z.number().int(),
  free: z.number().int().describe('max - live: creates this node takes now'),
  memory: z.object({ total_bytes: z.number().int(), available_bytes: z.number().int(), sandboxes_bytes: z.number().int() }),
});

export const PrewarmResultsSchema = z.object({
  results: z.array(
    z.union([
      z.object({ ref: z.string(), ok: z.literal(true), fetched_bytes: z.number().int() }),
      z.object({ ref: z.string(), ok: z.literal(false), error: z.object({ code: z.string(), message: z.string() }) }),
    ]),
  ),
});

export const ForkResultSchema = z.object({
  children: z.array(
    z.union([z.object({ id: z.string(), session: z.string().optional() }), z.object({ error: z.object({ code: z.string(), message: z.string() }) })]),
  ),
});

/** A snapshot of this node (POST /v1/sandboxes/:id/snapshot, GET /v1/snapshots). */
export const SnapshotSchema = z.object({
  snapshot: z.string(),
  layer: z.string(),
  env: z.string(),
  parent_ref: z.string().optional(),
  sandbox: z.string(),
  created_at: z.string(),
  size: z.number(),
  ref: z.string().optional(),
  pushed: z.array(z.string()).optional(),
});

export const HealthSchema = z.object({
  ok: z.literal(true),
  node: z.string().nullable(),
  started_at: z.string().describe('when this server process started: ids of this node made before it are lost (410 NODE_RESTARTED)'),
  version: z.string(),
  ready: z.boolean().describe('false while a start-up prefetch runs, with --ready-after-prefetch'),
  prefetch: z.object({ state: z.string(), total: z.number().int(), done: z.number().int(), failed: z.number().int() }).optional(),
});

export const HoldsSchema = z.object({
  node: z.string().nullable(),
  holds: z.array(
    z.object({
      ref: z.string(),
      env: z.string().nullable().describe('the environment the ref names; null where the registry has no such ref'),
      present: z.boolean().describe('every layer laid out in the store: a create pulls nothing'),
      layers_present: z.number().int(),
      layers: z.number().int(),
      error: z.object({ code: z.string(), message: z.string() }).optional().describe('why the ref could not be looked up'),
    }),
  ),
});

export const PrefetchStatusSchema = z.object({
  state: z.enum(['idle', 'running', 'done', 'failed']).describe('failed: it ended with refs that could not be pulled (listed in failed)'),
  total: z.number().int(),
  done: z.number().int().describe('refs in the store'),
  failed: z.array(z.object({ ref: z.string(), code: z.string(), message: z.string() })),
  bytes_fetched: z.number().int(),
  io_budget_bytes: z.number().int().nullable(),
  started_at: z.string().nullable(),
  finished_at: z.string().nullable(),
});
