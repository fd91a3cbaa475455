/**
 * A rootless sandbox's writes captured for a snapshot. An unprivileged user cannot read what its
 * sandboxes own (0600 files and 0700 dirs of subordinate ids), so the capture runs in a child,
 * snapshot-capture-worker.ts, as root of a user namespace mapping the user at 0 and the
 * sandbox's range at 1..COUNT: it reads the range's files whatever their mode and writes the
 * snapshot's packs as the user. Its rights reach the user's own files and the range's, no more
 * (host root's files stay unmapped there), and it walks the upper as every capture walks an
 * untrusted tree: through held directory fds, never following a link (layer/capture.ts).
 *
 * The sandbox is held (sandbox/freeze.ts) while the child reads its upper, and let go once the
 * child says the upper is read.
 */
import { spawn } from 'node:child_process';
import { closeSync, constants, openSync } from 'node:fs';
import { join } from 'node:path';
import { z } from 'zod';
import type { Digest } from '../cas/digest.js';
import { isErrorCode, MinisandboxError } from '../errors.js';
import { asSelfOverRange } from '../host/userns.js';
import type { EnvConfig } from '../layer/env.js';
import type { PushResult } from '../publish/push.js';
import { freezeSandbox } from '../sandbox/freeze.js';
import type { SandboxState } from '../sandbox/state.js';
import type { StorePaths } from '../store/paths.js';
import { workerProcessArgv } from '../util/worker-file.js';
import type { CaptureJob } from './snapshot-capture-worker.js';

/** Linux O_PATH (node's fs.constants lacks it): a handle on the dir, no read right needed to take it. */
const O_PATH = 0o10000000;
const UPPER_FD = 3;

const LineSchema = z.union([
  z.strictObject({ phase: z.literal('upload') }),
  z.strictObject({ result: z.custom<PushResult>((v) => typeof v === 'object' && v !== null) }),
  z.strictObject({ error: z.strictObject({ code: z.string().optional(), message: z.string(), hint: z.string().optional() }) }),
]);

/**
 * Pushes the sandbox's frozen lowers (a fork child's copies of its parents' writes) and its upper
 * onto `parent` in the registry at `registryDir` (a LocalRegistry), the upper under `tag`.
 */
export async function captureRootlessWrites(
  store: StorePaths,
  registryDir: string,
  state: SandboxState,
  parent: { digest: Digest; config: EnvConfig },
  lowers: string[],
  tag: string,
): Promise<PushResult> {
  const upperPath = state.upperKind === 'tmpfs' ? `/proc/${state.holderPid}/root${state.upperDir}/u` : join(state.upperDir, 'u');
  // `u` is the upper's own root, which the sandbox cannot rename or replace (it sees only the merged tree)
  const upperFd = openSync(upperPath, O_PATH | constants.O_DIRECTORY | constants.O_NOFOLLOW);
  // the range the sandbox's ids come from, shown from 1 in the child's namespace
  const job: CaptureJob = { store: store.root, registry: registryDir, parent, lowers, upperFd: UPPER_FD, idShift: 1, tag };
  const [cmd, ...args] = await asSelfOverRange(state.idMap, workerProcessArgv(import.meta.url, 'snapshot-capture-worker'));
  let thaw: (() => void) | undefined;
  try {
    thaw = await freezeSandbox(state);
    const child = spawn(cmd!, args, { stdio: ['pipe', 'pipe', 'pipe', upperFd] });
    let stderr = '';
    child.stderr!.on('data', (d: Buffer) => void (stderr.length < 8192 && (stderr += d.toString('utf8'))));
    child.stdin!.on('error', () => undefined);
    child.stdin!.end(JSON.stringify(job));
    let result: PushResult | undefined;
    let failure: { code?: string; message: string; hint?: string } | undefined;
    let buf = '';
    child.stdout!.on('data', (d: Buffer) => {
      buf += d.toString('utf8');
      for (let nl = buf.indexOf('\n'); nl >= 0; nl = buf.indexOf('\n')) {
        const line = buf.slice(0, nl);
        buf = buf.slice(nl + 1);
        let parsed: z.infer<typeof LineSchema> | undefined;
        try {
          parsed = LineSchema.parse(JSON.parse(line) as unknown);
        } catch {
          failure ??= { message: `unexpected output: ${line.slice(0, 200)}` };
          continue;
        }
        if ('phase' in parsed) {
          // packed: nothing reads the upper after this
          thaw?.();
          thaw = undefined;
        } else if ('result' in parsed) result = parsed.result;
        else failure = parsed.error;
      }
    });
    const code = await new Promise<number | null>((resolve, reject) => {
      child.on('error', reject);
      child.on('close', resolve);
    });
    if (code === 0 && result !== undefined && failure === undefined) return result;
    const f = failure ?? { message: stderr.trim() || `exit ${String(code)}` };
    throw new MinisandboxError(isErrorCode(f.code) ? f.code : 'CAPTURE_IO', `snapshot: capturing the sandbox's writes failed: ${f.message}`, {
      hint: f.hint ?? "check this user's subordinate id ranges (/etc/subuid, /etc/subgid)",
    });
  } finally {
    thaw?.();
    closeSync(upperFd);
  }
}
