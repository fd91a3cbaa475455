/**
 * The naming templates of the public per-task images the SWE datasets publish, by dataset, so a
 * spec names them as `image: dataset:<name>` rather than spelling the template (placeholders as
 * in image/dataset-images.ts). SWE-bench Multilingual's images are named as SWE-bench's.
 *
 * Multi-SWE-bench (read in github.com/multi-swe-bench/multi-swe-bench at 24f493f, 2025-12-18):
 * `Image.image_name()` in multi_swe_bench/harness/image.py is `<prefix>/<org>_m_<repo>`, the whole
 * name lowercased, with the prefix `mswebench`; an instance's image is tagged `pr-<number>` (its
 * `base` image `base`), e.g. `ImageDefault.image_tag` in harness/repos/c/jqlang/jq.py. The lists
 * of published images (scripts/images_mini.txt, images_verified.txt, images_rl.txt: 6,896 names)
 * are all `mswebench/...`, such as `mswebench/burntsushi_m_ripgrep:pr-1294` (org BurntSushi).
 * Repositories added by its environment agent (the `*_to_*.py` files under harness/repos)
 * override the prefix as `envagent`: a spec names `envagent/{org|lower}_m_{name|lower}:pr-{number}`
 * for rows of those.
 *
 * SWE-smith (github.com/SWE-bench/SWE-smith): a task instance's `image_name` is the image its
 * harness runs, as given (swesmith/harness/gather.py writes the repository profile's
 * `image_name`, swesmith/profiles/base.py: `<org>/swesmith.<arch>.<owner>_1776_<repo>.<commit
 * 8>`, lowercased, org `jyangballin`, later `swebench`); SWE-agent's SWESmithInstances also takes
 * it as is. Rows from before the profiles (a 2025-06 snapshot's swesmith/utils.py) name a local
 * tag, `swesmith.x86_64.<owner>__<repo>.<commit 8>`, which its download_images.py made from
 * `jyangballin/<that name with __ as _1776_>:latest`: such rows need that image named by hand.
 */
import { InvalidInputError } from '../errors.js';

const SWE_BENCH = 'swebench/sweb.eval.x86_64.{id}:latest';

export const DATASET_IMAGE_TEMPLATES: Readonly<Record<string, string>> = {
  'swe-bench': SWE_BENCH,
  'swe-bench-multilingual': SWE_BENCH,
  'multi-swe-bench': 'mswebench/{org|lower}_m_{name|lower}:pr-{number}',
  'swe-smith': '{image_name}',
};

const PREFIX = 'dataset:';

/** `image` with a `dataset:<name>` expanded to that dataset's template; any other image as given. */
export function expandImageTemplate(image: string, where: string): string {
  if (!image.startsWith(PREFIX)) return image;
  const name = image.slice(PREFIX.length);
  const t = Object.hasOwn(DATASET_IMAGE_TEMPLATES, name) ? DATASET_IMAGE_TEMPLATES[name] : undefined;
  if (t === undefined)
    throw new InvalidInputError(
      `${where}: image ${JSON.stringify(image)} names no dataset whose images are known`,
      `use one of ${Object.keys(DATASET_IMAGE_TEMPLATES)
        .map((n) => PREFIX + n)
        .join(', ')}, or the image's own template`,
    );
  return t;
}
