/**
 * Request bodies and queries of the native API (`/v1`), as zod schemas with inferred types. Field
 * names are snake_case because the clients are mostly Python; sizes and durations take a number
 * (bytes, seconds) or the CLI's text forms (`2g`, `30m`), so a trainer's config can use either.
 */
import { z } from 'zod';
import { RefNameSchema } from '../cas/ref-name.js';
import { SANDBOX_ID_RE } from '../sandbox/sandbox-id.js';

const SIZE_UNITS: Record<string, number> = { '': 1, k: 1024, m: 1024 ** 2, g: 1024 ** 3, t: 1024 ** 4 };
const DURATION_UNITS: Record<string, number> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 };

/** Bytes: a whole number, or `512m`, `2g`, `100k`. */
export const SizeSchema = z.union([
  z.number().int().positive(),
  z
    .string()
    .regex(/^\d+(\.\d+)?[kmgt]?$/i, 'a size: bytes, or a number with k, m, g or t (e.g. 512m)')
    .transform((s) => {
      const m = /^([\d.]+)([kmgt])?$/i.exec(s)!;
      return Math.round(Number(m[1]) * (SIZE_UNITS[(m[2] ?? '').toLowerCase()] ?? 1));
    })
    .pipe(z.number().int().positive()),
]);

/** Milliseconds from seconds (a number, may be fractional) or `30s`, `15m`, `6h`. */
export const DurationSchema = z
  .union([
    z
      .number()
      .positive()
      .transform((s) => Math.round(s * 1000)),
    z
      .string()
      .regex(/^\d+(\.\d+)?(ms|s|m|h|d)?$/, 'a duration: seconds, or e.g. 30s, 15m, 6h')
      .transform((s) => {
        const m = /^([\d.]+)(ms|s|m|h|d)?$/.exec(s)!;
        return Math.round(Number(m[1]) * (DURATION_UNITS[m[2] ?? 's'] ?? 1000));
      }),
  ])
  .pipe(z.number().int().positive());

/** An absolute path inside the sandbox (it resolves it in its own root; `..` cannot leave it). */
const SandboxPathSchema = z
  .string()
  .startsWith('/', 'an absolute path inside the sandbox')
  .refine((p) => !/[\0\n]/.test(p), 'may not contain NUL or newlines');

const EnvSchema = z.record(z.string().regex(/^[A-Za-z_][A-Za-z0-9_]*$/, 'variable names: letters, digits and _'), z.string());

/** A dataset's name or an instance id: one path segment of the tag `<dataset>/<instance_id>`. */
const TagPartSchema = z.string().regex(/^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$/, 'letters, digits, ".", "_" and "-"');

export const SnapshotIdSchema = z.string().regex(/^snap-[0-9a-f]{16}$/, 'a snapshot id (snap-<16 hex digits>)');

export const CreateSandboxBodySchema = z
  .strictObject({
    /** One source: a ref, or a dataset instance (the env tagged `<dataset>/<instance_id>`). */
    ref: z.string().min(1).optional(),
    dataset: TagPartSchema.optional(),
    instance_id: TagPartSchema.optional(),
    /** ... or a snapshot of this node. */
    snapshot: SnapshotIdSchema.optional(),
    limits: z
      .strictObject({
        cpus: z.number().positive().max(4096).optional(),
        memory: SizeSchema.optional(),
        pids: z.number().int().positive().optional(),
        disk: SizeSchema.optional(),
        /** Niceness of the sandbox's processes, 0-19 (default: the server's --sandbox-nice). */
        nice: z.number().int().min(0).max(19).optional(),
      })
      .optional(),
    network: z.enum(['none', 'host']).optional(),
    env: EnvSchema.optional(),
    workdir: SandboxPathSchema.optional(),
    /** Capped by the server's --ttl. */
    ttl: DurationSchema.optional(),
    /**
     * Host paths mounted into the sandbox: only beneath the dirs the operator allowed (`serve
     * --allow-mount DIR[:rw]`), read-only unless `readonly: false` under a dir allowed rw.
     */
    mounts: z
      .array(z.strictObject({ source: z.string().min(1).max(4096), target: SandboxPathSchema.max(4096), readonly: z.boolean().optional() }))
      .max(16)
      .optional(),
    /** Start the first reset's holder ahead (two more processes while it lives): its first reset is then as fast as later ones. */
    prewarm_reset: z.boolean().optional(),
  })
  .refine((b) => (b.dataset === undefined) === (b.instance_id === undefined), {
    message: 'dataset and instance_id go together (the env tagged <dataset>/<instance_id>)',
    path: ['instance_id'],
  })
  .refine((b) => [b.ref, b.dataset, b.snapshot].filter((x) => x !== undefined).length === 1, {
    message: 'give exactly one source: ref, dataset with instance_id, or snapshot',
    path: ['ref'],
  });
export type CreateSandboxBody = z.output<typeof CreateSandboxBodySchema>;

export const ExecBodySchema = z
  .strictObject({
    argv: z.array(z.string()).min(1).optional(),
    command: z.string().min(1).optional(),
    cwd: SandboxPathSchema.optional(),
    env: EnvSchema.optional(),
    timeout: DurationSchema.optional(),
    max_output: SizeSchema.optional(),
  })
  .refine((b) => (b.argv === undefined) !== (b.command === undefined), { message: 'give exactly one of argv or command', path: ['argv'] });
export type ExecBody = z.output<typeof ExecBodySchema>;

export const CreateSessionBodySchema = z.strictObject({
  /** Run in order in the new session (cd, source a venv, export); the first that fails fails the create. */
  startup: z.array(z.string().min(1)).default([]),
});

export const SessionRunBodySchema = z.strictObject({
  command: z.string().min(1),
  timeout: DurationSchema.optional(),
  max_output: SizeSchema.optional(),
});

export const ForkBodySchema = z.strictObject({
  count: z.number().int().min(1).max(64),
  /** Each child gets a session of this id, in this parent session's cwd with its exported variables. */
  session: z
    .string()
    .regex(/^[a-z0-9-]{1,64}$/, 'a session id')
    .optional(),
});

export const SnapshotBodySchema = z.strictObject({
  /** Also publish it to the node's registry (an environment other nodes create from by ref). */
  push: z.boolean().default(false),
  /** The ref it is pushed under; default `snapshots/<id>`. */
  tag: RefNameSchema.optional(),
});

export const ResetBodySchema = z
  .strictObject({
    /** Reset to this snapshot of the node instead of the creation state ... */
    snapshot: SnapshotIdSchema.optional(),
    /** ... or over this environment of the registry (a snapshot another node pushed), pulled if need be. */
    ref: RefNameSchema.optional(),
  })
  .refine((b) => b.snapshot === undefined || b.ref === undefined, { message: 'give at most one of snapshot or ref', path: ['ref'] });

export const SnapParamsSchema = z.strictObject({ snap: SnapshotIdSchema });

export const FileQuerySchema = z.strictObject({
  path: SandboxPathSchema,
  /** Octal permission bits for a write, e.g. `755`. */
  mode: z
    .string()
    .regex(/^0?[0-7]{3,4}$/, 'octal permission bits, e.g. 644 or 0755')
    .transform((s) => parseInt(s, 8))
    .optional(),
});

export const DiffQuerySchema = z.strictObject({
  workdir: SandboxPathSchema.optional(),
  base: z
    .string()
    .regex(/^[A-Za-z0-9._/^~-]+$/, 'a git revision')
    .optional(),
});

/** A sandbox id: `sb-...`, and `.<node>` after it on a server with a node name (sandbox/sandbox-id.ts). */
export const IdParamsSchema = z.strictObject({ id: z.string().regex(SANDBOX_ID_RE, 'a sandbox id') });
export const SessionParamsSchema = IdParamsSchema.extend({ sid: z.string().regex(/^[a-z0-9-]{1,64}$/, 'a session id') });

/** `true`/`false` in a query string (also `1`/`0`). */
const QueryFlagSchema = z.enum(['true', 'false', '1', '0']).transform((s) => s === 'true' || s === '1');

export const ExecQuerySchema = z.strictObject({
  /** Start the command as a job: 202 with its id, instead of waiting for it. */
  async: QueryFlagSchema.optional(),
});

export const JobParamsSchema = IdParamsSchema.extend({ job: z.string().regex(/^job-[0-9a-f]{16}$/, 'a job id (job-<hex>)') });

export const JobWaitQuerySchema = z.strictObject({
  /** Seconds to wait for a running job to end before answering (long poll); default 0. */
  wait: z.coerce.number().min(0).max(300, 'at most 300 seconds').optional(),
});

/** A directory inside the sandbox (list, tar download and upload). */
export const DirQuerySchema = z.strictObject({ path: SandboxPathSchema });

/** Refs, or instances of a dataset (`<dataset>/<instance_id>`): what /v1/holds and /v1/prefetch take. */
const RefsOrInstances = {
  refs: z.array(z.string().min(1)).min(1).max(10_000).optional(),
  /** Every env tagged `<dataset>/*` in the registry (prewarm, prefetch), or the given instances of it. */
  dataset: TagPartSchema.optional(),
  instance_ids: z.array(TagPartSchema).min(1).max(10_000).optional(),
};

export const PrewarmBodySchema = z
  .strictObject(RefsOrInstances)
  .refine((b) => b.instance_ids === undefined || b.dataset !== undefined, { message: 'instance_ids pick instances of a dataset', path: ['instance_ids'] })
  .refine((b) => (b.refs === undefined) !== (b.dataset === undefined), { message: 'give exactly one of refs or dataset', path: ['refs'] });

export const HoldsBodySchema = z
  .strictObject(RefsOrInstances)
  .refine((b) => (b.refs === undefined) !== (b.dataset === undefined), { message: 'give exactly one of refs or dataset', path: ['refs'] })
  .refine((b) => (b.dataset === undefined) === (b.instance_ids === undefined), {
    message: 'dataset and instance_ids go together (the envs tagged <dataset>/<instance_id>)',
    path: ['instance_ids'],
  });

export const PrefetchBodySchema = z
  .strictObject({
    ...RefsOrInstances,
    /** Compressed bytes being fetched at once (default 512m). */
    io_budget: SizeSchema.optional(),
  })
  .refine((b) => b.instance_ids === undefined || b.dataset !== undefined, { message: 'instance_ids pick instances of a dataset', path: ['instance_ids'] })
  .refine((b) => (b.refs === undefined) !== (b.dataset === undefined), { message: 'give exactly one of refs or dataset', path: ['refs'] });

export const HealthQuerySchema = z.strictObject({
  /** A readiness probe: 503 while the node is not ready (a start-up prefetch with --ready-after-prefetch). */
  ready: QueryFlagSchema.optional(),
});
