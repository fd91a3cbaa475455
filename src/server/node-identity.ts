/**
 * Which node a server is, for a pool of them: its name (in every sandbox id it makes, see
 * sandbox/sandbox-id.ts) and when it started, so an id this node made before a restart is told
 * apart from one it never made (410 NODE_RESTARTED, not 404).
 */
import { hostname } from 'node:os';
import { InvalidInputError, MinisandboxError } from '../errors.js';
import { NODE_LABEL_RE, parseSandboxId } from '../sandbox/sandbox-id.js';

export interface NodeIdentity {
  name: string;
  /** When this server process started (ms since the epoch). */
  startedAt: number;
}

/** Lower-cased, every run of other characters made one `-`, trimmed to a DNS label of 40. */
export function nodeLabel(text: string): string {
  return text
    .toLowerCase()
    .replace(/[^a-z0-9-]+/g, '-')
    .replace(/^-+/, '')
    .slice(0, 40)
    .replace(/-+$/, '');
}

/** `--node-name`, else $MINISANDBOX_NODE_NAME, else the host name, as a DNS label. */
export function nodeName(given: string | undefined, env: NodeJS.ProcessEnv = process.env, host: string = hostname()): string {
  const [source, text] =
    given !== undefined
      ? ['--node-name', given]
      : env.MINISANDBOX_NODE_NAME !== undefined && env.MINISANDBOX_NODE_NAME !== ''
        ? ['$MINISANDBOX_NODE_NAME', env.MINISANDBOX_NODE_NAME]
        : ['the host name', host];
  const label = nodeLabel(text);
  if (!NODE_LABEL_RE.test(label))
    throw new InvalidInputError(
      `${source} ${JSON.stringify(text)} has no letter or digit to name the node by`,
      'give --node-name NAME (letters, digits and -, at most 40): every sandbox id of this node ends in .NAME',
    );
  return label;
}

export class NodeRestartedError extends MinisandboxError {
  constructor(id: string, node: NodeIdentity) {
    super('NODE_RESTARTED', `sandbox ${id} was lost when node ${node.name} restarted at ${new Date(node.startedAt).toISOString()}`, {
      hint: 'create a new sandbox; what ran in it is gone (snapshot with push=true to keep a state across restarts)',
    });
  }
}

/** Whether `id` is one this node made before the current server started. */
export function lostInRestart(id: string, node: NodeIdentity): boolean {
  const p = parseSandboxId(id);
  return p !== undefined && p.node === node.name && p.madeAt < node.startedAt;
}
