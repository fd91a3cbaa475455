/**
 * Image sources named as skopeo and podman name them: `docker://HOST/REPO:TAG` or
 * `docker://HOST/REPO@sha256:...`, `oci:DIR[:TAG]`, `oci-archive:FILE[:TAG]`,
 * `docker-archive:FILE[:REPO:TAG]`. Anything else is not an image source (the CLI's `import`
 * then treats it as a directory or tarball, as before).
 */
import { DIGEST_RE, type Digest } from '../cas/digest.js';
import { InvalidInputError } from '../errors.js';

export type SourceRef =
  | { kind: 'docker'; registry: string; repository: string; tag?: string; digest?: Digest; text: string }
  | { kind: 'oci' | 'oci-archive' | 'docker-archive'; path: string; tag?: string; text: string };

const TRANSPORTS = ['docker://', 'oci:', 'oci-archive:', 'docker-archive:'] as const;

export function isImageSource(s: string): boolean {
  return TRANSPORTS.some((t) => s.startsWith(t));
}

/** Docker Hub's names: `ubuntu` is `docker.io/library/ubuntu`, served by registry-1.docker.io. */
export const DOCKER_HUB = 'docker.io';

export function parseSourceRef(text: string): SourceRef {
  if (text.startsWith('docker://')) return { kind: 'docker', ...parseDockerName(text.slice('docker://'.length), text), text };
  for (const kind of ['oci-archive', 'docker-archive', 'oci'] as const) {
    const prefix = `${kind}:`;
    if (!text.startsWith(prefix)) continue;
    const rest = text.slice(prefix.length);
    if (rest === '') throw new InvalidInputError(`${text}: no path`, `write ${kind}:PATH`);
    // PATH[:TAG]: the first ':' ends the path (as skopeo splits it), so a tag may hold '/' and ':'
    const colon = rest.indexOf(':');
    if (colon < 0) return { kind, path: rest, text };
    const tag = rest.slice(colon + 1);
    return tag === '' ? { kind, path: rest.slice(0, colon), text } : { kind, path: rest.slice(0, colon), tag, text };
  }
  throw new InvalidInputError(
    `${JSON.stringify(text)} is not an image source`,
    'use docker://HOST/REPO:TAG, oci:DIR[:TAG], oci-archive:FILE or docker-archive:FILE',
  );
}

function parseDockerName(name: string, text: string): { registry: string; repository: string; tag?: string; digest?: Digest } {
  let rest = name;
  let digest: Digest | undefined;
  const at = rest.indexOf('@');
  if (at >= 0) {
    const d = rest.slice(at + 1);
    if (!DIGEST_RE.test(d)) throw new InvalidInputError(`${text}: ${JSON.stringify(d)} is not a sha256 digest`, 'write @sha256:<64 hex digits>');
    digest = d;
    rest = rest.slice(0, at);
  }
  let tag: string | undefined;
  const lastSlash = rest.lastIndexOf('/');
  const colon = rest.indexOf(':', lastSlash + 1);
  if (colon >= 0) {
    tag = rest.slice(colon + 1);
    rest = rest.slice(0, colon);
    if (!/^[\w][\w.-]{0,127}$/.test(tag)) throw new InvalidInputError(`${text}: bad tag ${JSON.stringify(tag)}`);
  }
  const parts = rest.split('/');
  let registry = DOCKER_HUB;
  // the first component is a registry host when it looks like one (a dot, a port, or localhost)
  if (parts.length > 1 && (parts[0]!.includes('.') || parts[0]!.includes(':') || parts[0] === 'localhost')) registry = parts.shift()!;
  if (registry === DOCKER_HUB && parts.length === 1) parts.unshift('library');
  const repository = parts.join('/');
  if (!/^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:\/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*$/.test(repository)) {
    throw new InvalidInputError(`${text}: bad repository name ${JSON.stringify(repository)}`, 'repository names are lowercase, with / . _ - separators');
  }
  if (tag === undefined && digest === undefined) tag = 'latest';
  return { registry, repository, ...(tag === undefined ? {} : { tag }), ...(digest === undefined ? {} : { digest }) };
}
