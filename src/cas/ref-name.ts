/**
 * Ref names and ref bodies: the rules every registry backend and every caller (recipes, builds,
 * imports) share. A ref maps `dataset/instance_id` to an environment digest (registry/registry.ts).
 */
import { z } from 'zod';
import { InvalidInputError } from '../errors.js';
import { DigestSchema } from './digest.js';

/** Why a ref body names no digest (null: it does). */
export function refBodyProblem(body: string): string | null {
  const t = body.trim();
  if (DigestSchema.safeParse(t).success) return null;
  if (t === '') return 'empty (it names no environment)';
  return `holds ${JSON.stringify(t.length > 80 ? `${t.slice(0, 80)}...` : t)}, not a digest`;
}

/** Why a stored ref name is no ref name (null: it is one). */
export function refNameProblem(name: string): string | null {
  return RefNameSchema.safeParse(name).success ? null : 'not a valid ref name';
}

/**
 * Ref names: `dataset/instance_id` and the like. Path-like, but never able to name anything
 * outside `refs/`, and the same set of names on every backend.
 */
export const RefNameSchema = z
  .string()
  .min(1)
  .max(400)
  .regex(
    /^[A-Za-z0-9_][A-Za-z0-9._+@=-]*(\/[A-Za-z0-9_][A-Za-z0-9._+@=-]*)*$/,
    'ref names are `/`-separated parts of letters, digits and . _ + @ = - (a part must not start with . or -)',
  );

export function parseRefName(name: string): string {
  const r = RefNameSchema.safeParse(name);
  if (!r.success) throw new InvalidInputError(`invalid ref name ${JSON.stringify(name)}: ${r.error.issues[0]?.message ?? ''}`);
  return r.data;
}
