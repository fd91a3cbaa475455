/**
 * Directories: list, download as a tar stream, upload a tar into one. The work is done inside the
 * sandbox by the environment's own stat and tar, so every path (and every symlink a task planted)
 * resolves in the sandbox's root, never on the host.
 */
import { createReadStream } from 'node:fs';
import type { IncomingMessage } from 'node:http';
import { join } from 'node:path';
import type { FastifyInstance } from 'fastify';
import { InvalidInputError, MinisandboxError } from '../errors.js';
import { streamInSandbox } from '../sandbox/stream.js';
import { busyUntil, withSpoolDir } from './file-transfer.js';
import { type RouteContext, disconnectSignal, parse } from './http.js';
import { jsonReply } from './json-reply.js';
import { MemoryBudgetError, outputGrant, replyAccount } from './request-memory.js';
import { DirQuerySchema, IdParamsSchema } from './schemas.js';
import { TarTooLargeError, spoolCheckedTar } from './tar-upload.js';

export interface DirEntry {
  name: string;
  type: 'file' | 'dir' | 'symlink' | 'other';
  size: number;
  /** Permission bits in octal, e.g. `644`. */
  mode: string;
  /** A symlink's target, as stored in the sandbox (never followed). */
  target?: string;
}

// One stat for the whole directory (lstat: a symlink is described, not followed), printing no name:
// its lines (`%f %s`, which cannot hold a newline) follow the arguments' order. Then, after a NUL,
// each name NUL-terminated, then for each name its symlink target (readlink adds a newline) or
// nothing, NUL-terminated. A name is never parsed out of a line, so none can forge an entry.
const LIST_SCRIPT = `cd -- "$1" 2>/dev/null || exit 3
set --
for f in .* *; do
  case $f in .|..) ;; *) if [ -e "$f" ] || [ -L "$f" ]; then set -- "$@" "$f"; fi ;; esac
done
[ $# -eq 0 ] && exit 0
command -v stat >/dev/null 2>&1 || exit 4
stat -c '%f %s' -- "$@" || exit 5
printf '\\0'
printf '%s\\0' "$@"
for f; do if [ -L "$f" ]; then readlink -- "$f"; fi; printf '\\0'; done`;

const TAR_OUT_SCRIPT = `cd -- "$1" 2>/dev/null || exit 3
command -v tar >/dev/null 2>&1 || exit 4
exec tar -cf - .`;

const TAR_IN_SCRIPT = `command -v tar >/dev/null 2>&1 || exit 4
mkdir -p -- "$1" && cd -- "$1" || exit 3
exec tar -xof -`;

function typeOf(raw: number): DirEntry['type'] {
  switch (raw & 0o170000) {
    case 0o100000:
      return 'file';
    case 0o040000:
      return 'dir';
    case 0o120000:
      return 'symlink';
    default:
      return 'other';
  }
}

export class ListingError extends MinisandboxError {
  constructor(why: string) {
    super('SANDBOX_FILE', `the directory listing from the sandbox is malformed: ${why}`, {
      hint: 'the directory changed during the listing, or the environment has an unusual stat: list again, or list with exec',
    });
  }
}

/** Parses LIST_SCRIPT's output: stat lines, then NUL-terminated names, then NUL-terminated targets. */
export function parseListing(out: string): DirEntry[] {
  if (out === '') return [];
  const fields = out.split('\0');
  const lines = fields[0]!.replace(/\n$/, '').split('\n');
  const n = lines.length;
  // the stat lines, n names, n targets, and what follows the last NUL (nothing)
  if (fields.length !== 2 * n + 2 || fields[2 * n + 1] !== '') throw new ListingError(`${n} stat lines for ${fields.length - 2} fields`);
  const entries = lines.map((line, i): DirEntry => {
    const m = /^([0-9a-f]+) (\d+)$/.exec(line);
    if (m === null) throw new ListingError(`stat line ${JSON.stringify(line.slice(0, 80))}`);
    const raw = parseInt(m[1]!, 16);
    const e: DirEntry = { name: fields[1 + i]!, type: typeOf(raw), size: Number(m[2]), mode: (raw & 0o7777).toString(8).padStart(3, '0') };
    const target = fields[1 + n + i]!;
    if (e.type === 'symlink' && target !== '') e.target = target.replace(/\n$/, '');
    return e;
  });
  return entries.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
}

function notADir(path: string): MinisandboxError {
  return new MinisandboxError('SANDBOX_FILE', `${path} is not a directory in the sandbox`, { hint: 'list the parent directory to see what is there' });
}

function missingTool(tool: string): MinisandboxError {
  return new InvalidInputError(
    `the sandbox's environment has no ${tool}`,
    `install ${tool} in the environment (its recipe), or move files one by one with GET/PUT /v1/sandboxes/:id/files`,
  );
}

export function tarRoutes(app: FastifyInstance, ctx: RouteContext): void {
  const { mgr, fileLimit } = ctx;
  // the tar body reaches the route as the request stream: the size limit is counted as it arrives
  app.addContentTypeParser('application/x-tar', (_req, payload, done) => done(null, payload));

  app.get('/v1/sandboxes/:id/files/list', async (req, reply) => {
    const { id } = parse(IdParamsSchema, req.params, 'path');
    const q = parse(DirQuerySchema, req.query, 'query');
    const outputBudget = outputGrant(replyAccount(mgr.memory, reply));
    const o = await mgr.use(id, (e) =>
      e.sb.exec(['/bin/sh', '-c', LIST_SCRIPT, 'msb-list', q.path], { timeoutMs: 120_000, maxOutputBytes: 64 << 20, outputBudget }),
    );
    if (o.budgetCut === true) throw new MemoryBudgetError(`the listing of ${q.path}`, mgr.memory);
    if (o.status === 'ok' && o.exitCode === 3) throw notADir(q.path);
    if (o.status === 'ok' && o.exitCode === 4) throw missingTool('stat');
    if (o.status !== 'ok' || o.exitCode !== 0 || o.stdoutTruncated)
      throw new MinisandboxError('SANDBOX_FILE', `cannot list ${q.path} in the sandbox (${o.status}, exit ${o.exitCode}): ${o.stderr.trim().slice(-300)}`, {
        hint: o.stdoutTruncated ? 'the directory is too large to list at once: download it with GET .../tar, or list it with exec' : 'check the path',
      });
    return jsonReply(reply, { path: q.path, entries: parseListing(o.stdout) });
  });

  app.get('/v1/sandboxes/:id/tar', async (req, reply) => {
    const { id } = parse(IdParamsSchema, req.params, 'path');
    const q = parse(DirQuerySchema, req.query, 'query');
    const e = mgr.get(id);
    // what would fail is found out before the 200 goes out; a tar that fails later breaks off the stream
    const pre = await mgr.use(id, () =>
      e.sb.exec(['/bin/sh', '-c', 'cd -- "$1" 2>/dev/null || exit 3; command -v tar >/dev/null 2>&1 || exit 4', 'msb-pre', q.path]),
    );
    if (pre.status === 'ok' && pre.exitCode === 3) throw notADir(q.path);
    if (pre.status === 'ok' && pre.exitCode === 4) throw missingTool('tar');
    const signal = disconnectSignal(reply);
    const cmd = streamInSandbox(e.sb, ['/bin/sh', '-c', TAR_OUT_SCRIPT, 'msb-tar', q.path], { timeoutMs: 3_600_000, signal });
    // busy until the tar has been sent: a long download is use
    busyUntil(e, cmd.done);
    void cmd.done.then((r) => {
      if (r.exitCode !== 0) {
        ctx.log(
          JSON.stringify({ time: new Date().toISOString(), req: req.id, event: 'tar_failed', sandbox: id, exit: r.exitCode, stderr: r.stderr.slice(-300) }),
        );
        // the client sees a broken-off transfer, not a short tar that looks whole
        cmd.stdout.destroy(new Error(`tar exited ${r.exitCode}`));
      }
    });
    return reply.type('application/x-tar').send(cmd.stdout);
  });

  app.put('/v1/sandboxes/:id/tar', async (req, reply) => {
    const { id } = parse(IdParamsSchema, req.params, 'path');
    const q = parse(DirQuerySchema, req.query, 'query');
    const body = req.body as IncomingMessage | undefined;
    if (body === undefined || typeof (body as { pipe?: unknown }).pipe !== 'function')
      throw new InvalidInputError('body: send a tar as application/x-tar', 'set Content-Type: application/x-tar');
    const declared = Number(req.headers['content-length'] ?? 0);
    if (declared > fileLimit) throw new TarTooLargeError(fileLimit);
    // the archive is spooled whole before any of it is extracted: all or nothing
    const signal = disconnectSignal(reply);
    await mgr.use(id, (e) =>
      withSpoolDir(ctx.store, 'tar-upload-', async (spoolDir) => {
        const spooled = join(spoolDir, 'upload.tar');
        try {
          await spoolCheckedTar(body, fileLimit, spooled, signal);
        } finally {
          // whatever was not read is drained, so the client gets its answer
          if (!body.readableEnded) {
            body.unpipe();
            body.resume();
          }
        }
        const cmd = streamInSandbox(e.sb, ['/bin/sh', '-c', TAR_IN_SCRIPT, 'msb-untar', q.path], {
          stdin: createReadStream(spooled),
          timeoutMs: 3_600_000,
          signal,
        });
        cmd.stdout.resume();
        const r = await cmd.done;
        if (r.exitCode === 4) throw missingTool('tar');
        if (r.exitCode === 3) throw new InvalidInputError(`cannot make directory ${q.path} in the sandbox`, 'a parent is a file, or not writable');
        if (r.exitCode !== 0)
          throw new InvalidInputError(`tar in the sandbox failed (exit ${r.exitCode}): ${r.stderr.trim().slice(-300)}`, 'check that the body is a whole tar');
      }),
    );
    return reply.code(204).send();
  });
}
