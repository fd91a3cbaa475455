/**
 * GET /v1/openapi.json: an OpenAPI 3.1 document of the native API, generated (z.toJSONSchema) from
 * the zod schemas the routes parse with. One table below lists every /v1 route with its schemas;
 * a test holds it to the routes fastify actually has, so a new route without an entry fails it.
 */
import type { FastifyInstance } from 'fastify';
import { z } from 'zod';
import type { RouteContext } from './http.js';
import { EvaluateBodySchema } from './routes-evaluate.js';
import {
  CapacitySchema,
  DirListingSchema,
  ErrorBodySchema,
  EvaluationAnswerSchema,
  ForkResultSchema,
  HealthSchema,
  HoldsSchema,
  JobInfoSchema,
  JobStartedSchema,
  OutcomeBodySchema,
  PrefetchStatusSchema,
  PrewarmResultsSchema,
  SnapshotSchema,
  SandboxInfoSchema,
} from './response-schemas.js';
import {
  CreateSandboxBodySchema,
  CreateSessionBodySchema,
  DiffQuerySchema,
  DirQuerySchema,
  ExecBodySchema,
  ExecQuerySchema,
  FileQuerySchema,
  ForkBodySchema,
  HealthQuerySchema,
  HoldsBodySchema,
  IdParamsSchema,
  JobParamsSchema,
  JobWaitQuerySchema,
  PrefetchBodySchema,
  PrewarmBodySchema,
  ResetBodySchema,
  SessionParamsSchema,
  SessionRunBodySchema,
  SnapParamsSchema,
  SnapshotBodySchema,
} from './schemas.js';

type Method = 'GET' | 'POST' | 'PUT' | 'DELETE';
type ObjectSchema = z.ZodObject;

interface Response {
  description: string;
  /** A JSON body's schema, or the content type of a body that is not JSON. */
  body?: z.ZodType | { contentType: string };
}

export interface RouteDoc {
  method: Method;
  /** As registered with fastify (`:id` parameters). */
  path: string;
  summary: string;
  params?: ObjectSchema;
  query?: ObjectSchema;
  /** A JSON body's schema, or the content type of a raw body. */
  body?: z.ZodType | { contentType: string };
  responses: Record<number, Response>;
  /** Answered without the token. */
  open?: boolean;
}

const NO_CONTENT: Response = { description: 'done' };
const ok = (description: string, body: z.ZodType | { contentType: string }): Response => ({ description, body });

export const ROUTES: RouteDoc[] = [
  {
    method: 'GET',
    path: '/v1/health',
    summary: 'liveness and readiness (no token needed: probes send none)',
    open: true,
    query: HealthQuerySchema,
    responses: { 200: ok('alive (and ready, or not asked)', HealthSchema), 503: ok('asked ?ready=1 while not ready', HealthSchema) },
  },
  { method: 'GET', path: '/v1/capacity', summary: 'sandboxes held and the memory they use', responses: { 200: ok('capacity', CapacitySchema) } },
  {
    method: 'POST',
    path: '/v1/prewarm',
    summary: "pull and lay out environments in the node's store ahead of creates",
    body: PrewarmBodySchema,
    responses: { 200: ok('one result per ref', PrewarmResultsSchema) },
  },
  {
    method: 'POST',
    path: '/v1/holds',
    summary: "what the node's store holds of environments (for a pool's placement); pulls nothing",
    body: HoldsBodySchema,
    responses: { 200: ok('one entry per ref', HoldsSchema) },
  },
  {
    method: 'POST',
    path: '/v1/prefetch',
    summary: "start pulling environments into the node's store in the background, within an I/O budget",
    body: PrefetchBodySchema,
    responses: { 202: ok('started (or joined the running prefetch)', PrefetchStatusSchema) },
  },
  { method: 'GET', path: '/v1/prefetch', summary: "the background prefetch's progress", responses: { 200: ok('progress', PrefetchStatusSchema) } },
  {
    method: 'POST',
    path: '/v1/evaluate',
    summary: "grade a patch for a dataset instance in a fresh sandbox, as `score` does (SWE-bench's report.json object, with the grading status)",
    body: EvaluateBodySchema,
    responses: {
      200: ok('{"<instance_id>": report}: `status` timeout or error means the patch was not graded', EvaluationAnswerSchema),
      404: { description: 'unknown dataset or instance', body: ErrorBodySchema },
      501: { description: 'the server has no store, or grades no dataset (no --eval-dataset)', body: ErrorBodySchema },
    },
  },
  { method: 'GET', path: '/v1/openapi.json', summary: 'this document', responses: { 200: ok('OpenAPI 3.1', { contentType: 'application/json' }) } },
  {
    method: 'POST',
    path: '/v1/sandboxes',
    summary: 'create a sandbox from a ref or a dataset instance',
    body: CreateSandboxBodySchema,
    responses: {
      201: ok('created', SandboxInfoSchema),
      403: { description: 'mounts: a host path the operator did not allow (serve --allow-mount)', body: ErrorBodySchema },
      429: { description: 'at capacity (Retry-After)', body: ErrorBodySchema },
    },
  },
  { method: 'GET', path: '/v1/sandboxes', summary: 'live sandboxes', responses: { 200: ok('sandboxes', z.object({ sandboxes: z.array(SandboxInfoSchema) })) } },
  { method: 'GET', path: '/v1/sandboxes/:id', summary: 'one sandbox', params: IdParamsSchema, responses: { 200: ok('sandbox', SandboxInfoSchema) } },
  {
    method: 'DELETE',
    path: '/v1/sandboxes/:id',
    summary: 'destroy a sandbox (its jobs and sessions end)',
    params: IdParamsSchema,
    responses: { 204: NO_CONTENT },
  },
  {
    method: 'POST',
    path: '/v1/sandboxes/:id/fork',
    summary: 'independent children of the current state',
    params: IdParamsSchema,
    body: ForkBodySchema,
    responses: { 200: ok('one entry per child: id or error', ForkResultSchema) },
  },
  {
    method: 'POST',
    path: '/v1/sandboxes/:id/reset',
    summary: 'back to the creation state or a snapshot: same id, every process and session ends',
    params: IdParamsSchema,
    body: ResetBodySchema,
    responses: { 200: ok('the sandbox', SandboxInfoSchema) },
  },
  {
    method: 'POST',
    path: '/v1/sandboxes/:id/snapshot',
    summary: "freeze the sandbox's writable layer into a content-addressed layer (pushed to the registry on request)",
    params: IdParamsSchema,
    body: SnapshotBodySchema,
    responses: { 201: ok('the snapshot', SnapshotSchema) },
  },
  {
    method: 'GET',
    path: '/v1/snapshots',
    summary: "this node's snapshots",
    responses: { 200: ok('snapshots', z.object({ snapshots: z.array(SnapshotSchema) })) },
  },
  {
    method: 'DELETE',
    path: '/v1/snapshots/:snap',
    summary: 'delete a snapshot no live sandbox uses',
    params: SnapParamsSchema,
    responses: { 204: NO_CONTENT, 409: { description: 'a live sandbox uses it', body: ErrorBodySchema } },
  },
  {
    method: 'POST',
    path: '/v1/sandboxes/:id/exec',
    summary: 'run a command; with ?async=true, start it as a job',
    params: IdParamsSchema,
    query: ExecQuerySchema,
    body: ExecBodySchema,
    responses: {
      200: ok('the outcome', OutcomeBodySchema),
      202: ok('the job started (async)', JobStartedSchema),
      422: { description: "a bad field, or max_output above the server's --max-output (field max_output)", body: ErrorBodySchema },
      429: {
        description: 'async: the sandbox already runs its maximum of jobs, --max-jobs-per-sandbox; or the JSON body is past the --memory-budget (Retry-After)',
        body: ErrorBodySchema,
      },
    },
  },
  {
    method: 'GET',
    path: '/v1/sandboxes/:id/jobs',
    summary: "the sandbox's jobs: running, and finished ones within --job-output-budget bytes of output (and the last 64), oldest dropped first",
    params: IdParamsSchema,
    responses: { 200: ok('jobs', z.object({ jobs: z.array(JobInfoSchema) })) },
  },
  {
    method: 'GET',
    path: '/v1/sandboxes/:id/jobs/:job',
    summary: "a job's status; ?wait=N waits up to N seconds for it to end",
    params: JobParamsSchema,
    query: JobWaitQuerySchema,
    responses: {
      200: ok('the job', JobInfoSchema),
      404: { description: 'no such job, or a finished one dropped to keep the output budget (the message says it expired)', body: ErrorBodySchema },
    },
  },
  {
    method: 'DELETE',
    path: '/v1/sandboxes/:id/jobs/:job',
    summary: 'kill a running job (forget a finished one)',
    params: JobParamsSchema,
    responses: { 204: NO_CONTENT },
  },
  {
    method: 'POST',
    path: '/v1/sandboxes/:id/sessions',
    summary: 'a persistent shell, after its startup commands',
    params: IdParamsSchema,
    body: CreateSessionBodySchema,
    responses: { 201: ok('the session id', z.object({ session: z.string() })) },
  },
  {
    method: 'POST',
    path: '/v1/sandboxes/:id/sessions/:sid/run',
    summary: 'run a command in the session',
    params: SessionParamsSchema,
    body: SessionRunBodySchema,
    responses: { 200: ok('the outcome', OutcomeBodySchema) },
  },
  {
    method: 'POST',
    path: '/v1/sandboxes/:id/sessions/:sid/interrupt',
    summary: "Ctrl-C for the session's running command",
    params: SessionParamsSchema,
    responses: { 204: NO_CONTENT },
  },
  { method: 'DELETE', path: '/v1/sandboxes/:id/sessions/:sid', summary: 'close the session', params: SessionParamsSchema, responses: { 204: NO_CONTENT } },
  {
    method: 'GET',
    path: '/v1/sandboxes/:id/files',
    summary: "a file's bytes (its mode in X-File-Mode), streamed; a file of no size (a device) breaks off past the size limit",
    params: IdParamsSchema,
    query: FileQuerySchema,
    responses: {
      200: ok('the bytes', { contentType: 'application/octet-stream' }),
      422: { description: 'a regular file larger than the size limit', body: ErrorBodySchema },
    },
  },
  {
    method: 'PUT',
    path: '/v1/sandboxes/:id/files',
    summary: 'write a file (parents made)',
    params: IdParamsSchema,
    query: FileQuerySchema,
    body: { contentType: 'application/octet-stream' },
    responses: { 204: NO_CONTENT, 413: { description: 'too large', body: ErrorBodySchema } },
  },
  {
    method: 'GET',
    path: '/v1/sandboxes/:id/files/list',
    summary: 'a directory: names, types, sizes, modes',
    params: IdParamsSchema,
    query: DirQuerySchema,
    responses: { 200: ok('the entries', DirListingSchema) },
  },
  {
    method: 'GET',
    path: '/v1/sandboxes/:id/tar',
    summary: 'a directory as a tar stream (names relative to it)',
    params: IdParamsSchema,
    query: DirQuerySchema,
    responses: { 200: ok('the tar', { contentType: 'application/x-tar' }) },
  },
  {
    method: 'PUT',
    path: '/v1/sandboxes/:id/tar',
    summary: 'extract a tar into a directory (made if missing)',
    params: IdParamsSchema,
    query: DirQuerySchema,
    body: { contentType: 'application/x-tar' },
    responses: { 204: NO_CONTENT, 413: { description: 'too large', body: ErrorBodySchema }, 422: { description: 'an unsafe entry', body: ErrorBodySchema } },
  },
  {
    method: 'GET',
    path: '/v1/sandboxes/:id/diff',
    summary: "the repository's changes against its base commit",
    params: IdParamsSchema,
    query: DiffQuerySchema,
    responses: { 200: ok('a git patch', { contentType: 'text/x-diff' }) },
  },
];

type Json = Record<string, unknown>;

/** Requests are described as clients send them (before transforms), answers as they come. */
function jsonSchema(s: z.ZodType, io: 'input' | 'output'): Json {
  const { $schema: _drop, ...rest } = z.toJSONSchema(s, { io, unrepresentable: 'any', target: 'draft-2020-12' }) as Json;
  return rest;
}

function content(body: z.ZodType | { contentType: string }, io: 'input' | 'output'): Json {
  if (body instanceof z.ZodType) return { 'application/json': { schema: jsonSchema(body, io) } };
  return { [body.contentType]: { schema: { type: 'string', contentMediaType: body.contentType } } };
}

function parameters(s: ObjectSchema | undefined, where: 'path' | 'query'): Json[] {
  if (s === undefined) return [];
  const props = (jsonSchema(s, 'input').properties ?? {}) as Record<string, Json>;
  return Object.entries(s.shape).map(([name, field]) => ({
    name,
    in: where,
    required: where === 'path' || !(field as z.ZodType).safeParse(undefined).success,
    schema: props[name] ?? {},
  }));
}

export function openApiDocument(routes: readonly RouteDoc[] = ROUTES): Json {
  const paths: Record<string, Record<string, Json>> = {};
  for (const r of routes) {
    const pathParams = [...r.path.matchAll(/:([A-Za-z_]+)/g)].map((m) => m[1]!);
    const declared = Object.keys(r.params?.shape ?? {});
    if (pathParams.join(',') !== declared.join(','))
      throw new Error(`openapi: ${r.method} ${r.path} has path parameters ${pathParams.join(',')} but its schema ${declared.join(',')}`);
    const responses: Json = {};
    for (const [status, res] of Object.entries(r.responses))
      responses[status] = { description: res.description, ...(res.body === undefined ? {} : { content: content(res.body, 'output') }) };
    responses.default = { description: 'an error', content: { 'application/json': { schema: jsonSchema(ErrorBodySchema, 'output') } } };
    const params = [...parameters(r.params, 'path'), ...parameters(r.query, 'query')];
    const key = r.path.replace(/:([A-Za-z_]+)/g, '{$1}');
    paths[key] ??= {};
    paths[key][r.method.toLowerCase()] = {
      summary: r.summary,
      operationId: `${r.method.toLowerCase()}${key.replace(/[{}]/g, '').replace(/[^A-Za-z0-9]+(.)?/g, (_m, c: string | undefined) => (c ?? '').toUpperCase())}`,
      ...(params.length === 0 ? {} : { parameters: params }),
      ...(r.body === undefined ? {} : { requestBody: { required: true, content: content(r.body, 'input') } }),
      ...(r.open === true ? { security: [] } : {}),
      responses,
    };
  }
  return {
    openapi: '3.1.0',
    info: { title: 'minisandbox server', version: '1', description: 'The native API of `minisandbox serve` (see README.md, section "Sandbox server").' },
    components: {
      securitySchemes: { bearer: { type: 'http', scheme: 'bearer' }, apiKey: { type: 'apiKey', in: 'header', name: 'X-API-Key' } },
    },
    security: [{ bearer: [] }, { apiKey: [] }],
    paths,
  };
}

const recorded = new WeakMap<FastifyInstance, Array<{ method: string; url: string }>>();

/** Starts noting every route registered on `app` from here on (the test compares them with ROUTES). */
export function recordRoutes(app: FastifyInstance): void {
  const list: Array<{ method: string; url: string }> = [];
  recorded.set(app, list);
  app.addHook('onRoute', (r) => {
    for (const m of Array.isArray(r.method) ? r.method : [r.method]) if (m !== 'HEAD') list.push({ method: m, url: r.url });
  });
}

export function registeredRoutes(app: FastifyInstance): ReadonlyArray<{ method: string; url: string }> {
  return recorded.get(app) ?? [];
}

export function openApiRoutes(app: FastifyInstance, _ctx: RouteContext): void {
  let doc: Json | undefined;
  app.get('/v1/openapi.json', async () => (doc ??= openApiDocument()));
}
