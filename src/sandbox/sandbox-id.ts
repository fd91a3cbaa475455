/**
 * Sandbox ids: `sb-<ms since epoch, base 36>-<8 hex digits>`, and where a node name is given (a server
 * of a cluster), `.<node>` after it, so the id alone says which node holds the sandbox and when
 * it was made (a restarted node tells an id of its predecessor from one it never made).
 */
import { randomHex } from '../util/lazy-crypto.js';

/** A node's name in ids: a DNS label of at most 40 characters. */
export const NODE_LABEL_RE = /^[a-z0-9](?:[a-z0-9-]{0,38}[a-z0-9])?$/;

/** Any sandbox id: a label of up to 64 characters, optionally `.<node>`. */
export const SANDBOX_ID_RE = /^[a-z0-9][a-z0-9-]{0,63}(?:\.[a-z0-9](?:[a-z0-9-]{0,38}[a-z0-9])?)?$/;

export function newSandboxId(node?: string): string {
  return `sb-${Date.now().toString(36)}-${randomHex(4)}${node === undefined ? '' : `.${node}`}`;
}

/** The time and node of an id this code made; undefined for any other id (a caller's own). */
export function parseSandboxId(id: string): { madeAt: number; node: string | undefined } | undefined {
  const m = /^sb-([0-9a-z]{1,11})-[0-9a-f]{8}(?:\.([a-z0-9-]+))?$/.exec(id);
  if (m === null) return undefined;
  return { madeAt: Number.parseInt(m[1]!, 36), node: m[2] };
}
