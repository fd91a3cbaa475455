/**
 * Typed errors. Every error a user can meet carries a stable `code` (for scripts and `--json`)
 * and a `hint` that says what to do next.
 */
export class MinisandboxError extends Error {
  readonly code: string;
  readonly hint: string | undefined;
  constructor(code: string, message: string, opts: { hint?: string; cause?: unknown } = {}) {
    super(message, opts.cause === undefined ? undefined : { cause: opts.cause });
    this.name = 'MinisandboxError';
    this.code = code;
    this.hint = opts.hint;
  }
}

/** Content did not match the digest that names it: corrupt or hostile registry/store data. */
export class DigestMismatchError extends MinisandboxError {
  constructor(what: string, expected: string, actual: string) {
    super('DIGEST_MISMATCH', `${what}: expected ${expected}, got ${actual}`, {
      hint: 'the registry or store holds corrupt data; run `minisandbox verify` and re-push the affected content',
    });
  }
}

/** A blob, ref or object that should exist does not. */
export class NotFoundError extends MinisandboxError {
  constructor(what: string, hint?: string) {
    super('NOT_FOUND', `${what} not found`, hint === undefined ? {} : { hint });
  }
}

/** A manifest, recipe, dataset row or other input failed validation. */
export class InvalidInputError extends MinisandboxError {
  constructor(message: string, hint?: string) {
    super('INVALID_INPUT', message, hint === undefined ? {} : { hint });
  }
}

/** A manifest entry would escape its layer root (absolute path, `..`, through a symlink, ...). */
export class UnsafePathError extends MinisandboxError {
  constructor(path: string, why: string) {
    super('UNSAFE_PATH', `unsafe path ${JSON.stringify(path)}: ${why}`, {
      hint: 'the layer is malformed or hostile; it was rejected before anything was laid out',
    });
  }
}

/** The host lacks something the operation needs (user namespaces, uidmap, bubblewrap, ...). */
export class HostCapabilityError extends MinisandboxError {
  constructor(message: string, hint: string) {
    super('HOST_CAPABILITY', message, { hint });
  }
}

export function errorMessage(e: unknown): string {
  return e instanceof Error ? e.message : String(e);
}
