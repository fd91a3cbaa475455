/**
 * What was converted before, kept in the registry itself so every importer sharing it benefits:
 * - `_image/diffid/<hex>`: an image layer (by diff id, the sha256 of its uncompressed tar) ->
 *   an environment of that one converted layer, carrying the image layer's sizes; a second image
 *   sharing a base finds its base layers here and neither downloads nor converts them;
 * - `_image/config/<hex>`: an image (by its config's digest, the same whatever the transport or
 *   compression) -> the environment it became; an image imported before is not fetched again.
 * Refs reach environment configs like any other ref, so gc keeps what they name, and `_`-refs
 * are bookkeeping that `ls` and `audit` leave out by default.
 */
import { type Digest, digestHex } from '../cas/digest.js';
import { ENV_MEDIA_TYPE, EnvConfigSchema, type ImageLayerInfo, type LayerRef, RuntimeConfigSchema } from '../layer/env.js';
import { putJsonBlob, readJsonBlob } from '../registry/blobs.js';
import type { Registry } from '../registry/registry.js';
import { CONVERTER_VERSION } from './layer-convert.js';

/** Labels of a diff-id record holding the layer's /etc/passwd and /etc/group (to resolve a named USER later). */
export const PASSWD_LABEL = 'org.minisandbox.image.etc-passwd';
export const GROUP_LABEL = 'org.minisandbox.image.etc-group';

export const diffIdRefName = (diffId: Digest): string => `_image/diffid/${digestHex(diffId)}`;
export const imageRefName = (config: Digest): string => `_image/config/${digestHex(config)}`;

export async function findDiffId(
  reg: Registry,
  diffId: Digest,
): Promise<{ layer: LayerRef; info: ImageLayerInfo; files: { passwd?: string; group?: string } } | null> {
  const env = await reg.getRef(diffIdRefName(diffId));
  if (env === null) return null;
  const cfg = await readJsonBlob(reg, env, EnvConfigSchema, 'image layer record');
  const layer = cfg.layers[0];
  const info = cfg.image?.layers[0];
  if (layer === undefined || info === undefined || info.diffId !== diffId) return null;
  // converted by older rules (a pull may refuse what they made): convert again
  if (cfg.image?.converter !== CONVERTER_VERSION) return null;
  // a gc may have removed what the record names (it keeps only what refs reach): convert again
  for (const p of layer.packs) if ((await reg.statBlob(p.pack)) === null || (await reg.statBlob(p.index)) === null) return null;
  if ((await reg.statBlob(layer.manifest)) === null) return null;
  if (info.implicitDirs !== undefined && (await reg.statBlob(info.implicitDirs)) === null) return null;
  const passwd = cfg.config.labels[PASSWD_LABEL];
  const group = cfg.config.labels[GROUP_LABEL];
  return { layer, info, files: { ...(passwd === undefined ? {} : { passwd }), ...(group === undefined ? {} : { group }) } };
}

/** Written once the layer's packs and manifest are in the registry. */
export async function recordDiffId(reg: Registry, layer: LayerRef, info: ImageLayerInfo, files: { passwd?: string; group?: string }): Promise<void> {
  const labels: Record<string, string> = {};
  if (files.passwd !== undefined) labels[PASSWD_LABEL] = files.passwd;
  if (files.group !== undefined) labels[GROUP_LABEL] = files.group;
  const env = await putJsonBlob(reg, {
    mediaType: ENV_MEDIA_TYPE,
    layers: [layer],
    config: RuntimeConfigSchema.parse({ labels }),
    image: { source: `diffid:${info.diffId}`, config: info.diffId, layers: [info], converter: CONVERTER_VERSION },
  });
  await reg.putRef(diffIdRefName(info.diffId), env);
}
