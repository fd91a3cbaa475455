/**
 * The program a rootless snapshot's capture runs as (runtime/snapshot-capture.ts starts it): as
 * root of a user namespace that maps the caller at 0 and the sandbox's id range above it, so it
 * may read the sandbox's 0600 files and 0700 dirs, while what it writes (packs, the manifest, the
 * store's temporary files) is the caller's. It pushes each tree of its job (stdin, JSON) onto the
 * one before, as the snapshot's layers, the upper dir last, and prints one JSON line per event on
 * stdout: `{"phase":"upload"}` once the upper is read, then `{"result":...}` or `{"error":...}`.
 *
 * The upper comes as a held directory fd (3), opened by the caller, which may reach it where this
 * namespace may not (a tmpfs upper through the holder's /proc/<pid>/root). The capture walks it as
 * every capture walks an untrusted tree (layer/capture.ts): relative to held fds, following no link.
 */
import { z } from 'zod';
import { DigestSchema } from '../cas/digest.js';
import { MinisandboxError } from '../errors.js';
import { EnvConfigSchema } from '../layer/env.js';
import { pushTree } from '../publish/push.js';
import { LocalRegistry } from '../registry/local.js';
import { resolveEnv } from '../registry/resolve-env.js';
import { StorePaths } from '../store/paths.js';

export const CaptureJobSchema = z.strictObject({
  store: z.string(),
  registry: z.string(),
  parent: z.strictObject({ digest: DigestSchema, config: EnvConfigSchema }),
  /** Frozen copies of a fork's parents' writes, bottom first (paths this namespace reaches). */
  lowers: z.array(z.string()),
  /** fd of the upper dir, inherited. */
  upperFd: z.number().int().min(3),
  /** Host id base minus one: what the namespace shows a range id as, minus its in-sandbox id. */
  idShift: z.number().int().min(0),
  tag: z.string(),
});
export type CaptureJob = z.infer<typeof CaptureJobSchema>;

const print = (o: unknown): void => void process.stdout.write(`${JSON.stringify(o)}\n`);

async function main(): Promise<void> {
  const chunks: Buffer[] = [];
  for await (const c of process.stdin) chunks.push(c as Buffer);
  const job = CaptureJobSchema.parse(JSON.parse(Buffer.concat(chunks).toString('utf8')) as unknown);
  const reg = new LocalRegistry(job.registry);
  const store = new StorePaths(job.store);
  let parent = job.parent;
  for (const dir of job.lowers) {
    const r = await pushTree(reg, store, dir, { parent, overlayUpper: true, idShift: job.idShift });
    parent = await resolveEnv(reg, r.env);
  }
  // `/.` so the magic link is crossed, not opened (capture opens its root O_NOFOLLOW)
  const result = await pushTree(reg, store, `/proc/self/fd/${job.upperFd}/.`, {
    parent,
    overlayUpper: true,
    idShift: job.idShift,
    keepRootPath: true,
    tag: job.tag,
    onProgress: (p) => {
      if (p.phase === 'upload') print({ phase: 'upload' });
    },
  });
  print({ result });
}

main().then(
  () => process.exit(0),
  (e: unknown) => {
    const err = e instanceof MinisandboxError ? { code: e.code, message: e.message, hint: e.hint } : { message: String((e as Error)?.message ?? e) };
    print({ error: err });
    process.exit(1);
  },
);
