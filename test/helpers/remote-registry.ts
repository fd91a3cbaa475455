import type { Registry } from '../../src/registry/registry.js';

/**
 * The registry as a remote backend would be: no local pack files for the lay-out's helper to read
 * itself, so frames travel in its records, and those too large to hold are spooled to files.
 */
export function asRemote(reg: Registry): Registry {
  const remote = Object.create(reg) as Registry;
  Object.defineProperty(remote, 'localFile', { value: undefined });
  return remote;
}
