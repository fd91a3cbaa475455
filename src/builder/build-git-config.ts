/**
 * The git settings a build sandbox's commands get, through git's GIT_CONFIG_COUNT variables, so
 * that cloning a local path works there.
 *
 * git clones a local path (`git clone /mirrors/x.git`, or a submodule whose URL is one) by
 * hardlinking the source's objects, and since 2.39.5 (CVE-2024-32021) dies with `hardlink
 * different from source` when a new link is not the inode it linked. In a build sandbox the
 * source sits in a lower overlayfs layer: linking a lower file copies it up, and the link then
 * reports the upper's device and inode number, not the ones git saw (measured in a build sandbox:
 * 43/4265003 before the link, 42/20 after), so every such clone fails, with a RAM upper or a disk
 * one. Rewriting absolute paths to file:// URLs makes
 * git copy objects through its pack transport instead, which links nothing; git refuses the file
 * transport for submodules unless allowed (since 2.38.1: CVE-2022-39253, where a local clone
 * followed symlinks in the source's objects directory, which the transport does not do).
 *
 * Only the build commands see these (never the environment's runtime config): they are how the
 * build works around the overlay, not part of what it builds. A recipe that sets GIT_CONFIG_COUNT
 * in its own `env` replaces them; one its parent environment sets is kept, ours after it.
 */

export const BUILD_GIT_CONFIG: ReadonlyArray<readonly [key: string, value: string]> = [
  ['url.file:///.insteadOf', '/'],
  ['protocol.file.allow', 'always'],
];

/** The GIT_CONFIG_* variables of BUILD_GIT_CONFIG, numbered after those `parentEnv` already sets. */
export function buildGitConfigEnv(parentEnv: Readonly<Record<string, string>>): Record<string, string> {
  const own = parentEnv.GIT_CONFIG_COUNT;
  const first = own !== undefined && /^\d{1,4}$/.test(own) ? Number(own) : 0;
  const out: Record<string, string> = { GIT_CONFIG_COUNT: String(first + BUILD_GIT_CONFIG.length) };
  for (const [i, [key, value]] of BUILD_GIT_CONFIG.entries()) {
    out[`GIT_CONFIG_KEY_${first + i}`] = key;
    out[`GIT_CONFIG_VALUE_${first + i}`] = value;
  }
  return out;
}
