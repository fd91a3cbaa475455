import { MinisandboxError } from '../errors.js';

/**
 * A pack or its index is damaged or lies (undecodable frame, stated lengths that do not match the
 * bytes, truncated blob). Distinct from DigestMismatchError, which means the bytes decoded but
 * are not the object they claim to be.
 */
export class CorruptPackError extends MinisandboxError {
  constructor(message: string, opts: { cause?: unknown } = {}) {
    super('CORRUPT_PACK', message, {
      hint: 'the registry holds a damaged or hostile pack; run `minisandbox verify` and re-push the affected layers',
      ...opts,
    });
  }
}

/** A source file changed between capture (which hashed it) and packing. */
export class SourceChangedError extends MinisandboxError {
  constructor(path: string, why: string) {
    super('SOURCE_CHANGED', `${path} changed while being packed: ${why}`, {
      hint: 'something is writing to the tree being captured; stop it and capture again',
    });
  }
}
