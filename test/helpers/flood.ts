/**
 * Two tenants of one `serve`: a hostile one that floods it with oversized requests (execs whose
 * output floods in at the largest max_output allowed, reads of /dev/zero, zips that inflate to
 * the size limit, JSON bodies near and past their limit, a max_output past the ceiling), and a
 * quiet one whose sandboxes keep running small commands, each checked and timed. For the load
 * test and bench/serve.ts's flood section. Plain node:http over kept-alive connections, so the
 * clients' own cost stays small beside the server's.
 */
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { Agent, request } from 'node:http';
import { fileURLToPath } from 'node:url';

export interface Target {
  url: string;
  token: string;
}

interface Answer {
  status: number;
  body: Buffer;
}

const agent = new Agent({ keepAlive: true, maxSockets: 256 });

/** One request; `readUpTo` stops reading (and hangs up) once that many body bytes came. */
function call(t: Target, method: string, path: string, o: { json?: unknown; raw?: Buffer; type?: string; readUpTo?: number } = {}): Promise<Answer> {
  const { hostname, port } = new URL(t.url);
  const payload = o.json !== undefined ? Buffer.from(JSON.stringify(o.json)) : o.raw;
  const headers: Record<string, string> = { authorization: `Bearer ${t.token}` };
  if (payload !== undefined) {
    headers['content-type'] = o.json !== undefined ? 'application/json' : (o.type ?? 'application/octet-stream');
    headers['content-length'] = String(payload.length);
  }
  return new Promise((resolve, reject) => {
    const req = request({ hostname, port, path, method, headers, agent: o.readUpTo === undefined ? agent : false }, (res) => {
      const chunks: Buffer[] = [];
      let n = 0;
      res.on('data', (c: Buffer) => {
        n += c.length;
        if (o.readUpTo === undefined) chunks.push(c);
        else if (n >= o.readUpTo) {
          req.destroy();
          resolve({ status: res.statusCode ?? 0, body: Buffer.alloc(0) });
        }
      });
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body: Buffer.concat(chunks) }));
      res.on('error', () => resolve({ status: res.statusCode ?? 0, body: Buffer.concat(chunks) }));
    });
    req.on('error', (e) => (req.destroyed && o.readUpTo !== undefined ? undefined : reject(e)));
    req.end(payload);
  });
}

/** A multipart body as SWE-ReX's client sends an upload: the file first, then target_path and unzip. */
function uploadForm(zip: Buffer, target: string): { raw: Buffer; type: string } {
  const b = `----msb${Math.random().toString(16).slice(2)}`;
  const field = (name: string, value: string): string => `--${b}\r\nContent-Disposition: form-data; name="${name}"\r\n\r\n${value}\r\n`;
  const head = `--${b}\r\nContent-Disposition: form-data; name="file"; filename="zipped_transfer.zip"\r\nContent-Type: application/zip\r\n\r\n`;
  const tail = `\r\n${field('target_path', target)}${field('unzip', 'true')}--${b}--\r\n`;
  return { raw: Buffer.concat([Buffer.from(head), zip, Buffer.from(tail)]), type: `multipart/form-data; boundary=${b}` };
}

/** A zip of one deflated entry of `mib` MiB of zeros: about a thousandth of that. */
export function zipBomb(file: string, mib: number): void {
  execFileSync('python3', [
    '-c',
    'import zipfile,sys\nwith zipfile.ZipFile(sys.argv[1], "w", zipfile.ZIP_DEFLATED) as z:\n' +
      '  with z.open("zeros.bin", "w") as f:\n    for _ in range(int(sys.argv[2])): f.write(bytes(1 << 20))',
    file,
    String(mib),
  ]);
}

export interface FloodSizes {
  /** Output each flooding exec prints, and the max_output it asks for (the server's --max-output). */
  execBytes: number;
  maxOutput: number;
  /** Reads of /dev/zero per round, and how much of each the client takes before it hangs up. */
  reads: number;
  readBytes: number;
  /** Zip uploads per round (one per sandbox in turn). */
  zips: number;
  zip: Buffer;
  /** JSON bodies near the 8 MiB limit per round (refused after parsing: an unknown field). */
  bodies: number;
}

/**
 * Rounds of every hostile request at once, on the tenant's sandboxes `ids`, until `stop()` says
 * so (checked between rounds; at least one round). Returns how often each kind got each status;
 * a request that failed at the connection counts as status 0 with its error's code.
 */
export async function flood(t: Target, ids: string[], s: FloodSizes, stop: () => boolean): Promise<Map<string, number>> {
  const tally = new Map<string, number>();
  const add = (key: string): void => void tally.set(key, (tally.get(key) ?? 0) + 1);
  const count = (kind: string, p: Promise<Answer>): Promise<void> =>
    p.then(
      (a) => add(`${kind} ${a.status}`),
      (e: unknown) => add(`${kind} 0 ${(e as { code?: string }).code ?? String(e)}`),
    );
  const near = Buffer.alloc(7 << 20, 'b').toString();
  let round = 0;
  do {
    round++;
    const work: Promise<void>[] = [];
    for (const id of ids) {
      const command = `yes xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx | head -c ${s.execBytes}`;
      work.push(count('exec', call(t, 'POST', `/v1/sandboxes/${id}/exec`, { json: { command, max_output: s.maxOutput } })));
    }
    work.push(count('max_output', call(t, 'POST', `/v1/sandboxes/${ids[0]}/exec`, { json: { command: 'true', max_output: '1t' } })));
    for (let i = 0; i < s.reads; i++)
      work.push(count('read', call(t, 'GET', `/v1/sandboxes/${ids[i % ids.length]}/files?path=/dev/zero`, { readUpTo: s.readBytes })));
    work.push(count('read_file', call(t, 'POST', `/swerex/${ids[0]}/read_file`, { json: { path: '/dev/zero' } })));
    for (let i = 0; i < s.zips; i++) {
      const id = ids[i % ids.length]!;
      const target = `/tmp/bomb-${round}-${i}`;
      work.push(
        count(
          'zip',
          call(t, 'POST', `/swerex/${id}/upload`, uploadForm(s.zip, target)).then(async (a) => {
            await call(t, 'POST', `/v1/sandboxes/${id}/exec`, { json: { command: `rm -rf ${target}` } });
            return a;
          }),
        ),
      );
    }
    for (let i = 0; i < s.bodies; i++)
      work.push(count('body', call(t, 'POST', `/v1/sandboxes/${ids[i % ids.length]}/exec`, { json: { command: 'true', junk: near } })));
    work.push(count('oversized', call(t, 'POST', `/v1/sandboxes/${ids[0]}/exec`, { raw: Buffer.alloc(9 << 20, ' '), type: 'application/json' })));
    await Promise.all(work);
  } while (!stop());
  return tally;
}

export interface VictimResult {
  runs: number;
  /** Each failure: what was asked and what came back. */
  failures: string[];
  /** Milliseconds of each command, in order. */
  latencies: number[];
}

/**
 * The quiet tenant: each of its sandboxes loops a small command (exec, and every other one a run
 * in a session), checking its answer whole, until `stop()`.
 */
export async function victim(t: Target, ids: string[], stop: () => boolean): Promise<VictimResult> {
  const r: VictimResult = { runs: 0, failures: [], latencies: [] };
  await Promise.all(
    ids.map(async (id, k) => {
      const ses = await call(t, 'POST', `/v1/sandboxes/${id}/sessions`, { json: {} });
      const session = (JSON.parse(ses.body.toString()) as { session: string }).session;
      for (let i = 0; !stop(); i++) {
        const want = `victim ${k} ${i}\n`;
        const command = `echo victim ${k} ${i}`;
        const path = i % 2 === 0 ? `/v1/sandboxes/${id}/exec` : `/v1/sandboxes/${id}/sessions/${session}/run`;
        const t0 = performance.now();
        const a = await call(t, 'POST', path, { json: { command } }).catch((e: unknown) => ({ status: 0, body: Buffer.from(String(e)) }));
        r.latencies.push(performance.now() - t0);
        r.runs++;
        const text = a.body.toString();
        let ok = false;
        try {
          const o = JSON.parse(text) as Record<string, unknown>;
          ok = a.status === 200 && o.outcome === 'ok' && o.exit_code === 0 && o.stdout === want && o.stdout_truncated === false;
        } catch {
          // not JSON: a failure
        }
        if (!ok) r.failures.push(`${path} ${command}: ${a.status} ${text.slice(0, 300)}`);
      }
    }),
  );
  return r;
}

/**
 * As a process of its own (so that the flood's clients share neither its event loop nor its
 * timing): `node --import tsx test/helpers/flood.ts victim <url> <token-file> <seconds> <id>...`
 * runs the quiet tenant for that long and prints its VictimResult as one JSON line.
 */
if (process.argv[1] === fileURLToPath(import.meta.url) && process.argv[2] === 'victim') {
  const [url, tokenFile, seconds, ...ids] = process.argv.slice(3);
  const end = performance.now() + Number(seconds) * 1000;
  const r = await victim({ url: url!, token: readFileSync(tokenFile!, 'utf8').trim() }, ids, () => performance.now() >= end);
  process.stdout.write(`${JSON.stringify(r)}\n`);
  agent.destroy();
}
