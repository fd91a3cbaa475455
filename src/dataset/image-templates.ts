/**
 * The naming templates of the public per-task images the SWE datasets publish, by dataset, so a
 * spec names them as `image: dataset:<name>` rather than spelling the template (placeholders as
 * in image/dataset-images.ts). SWE-bench Multilingual's images are named as SWE-bench's;
 * Multi-SWE-bench's after the pull request (`mswebench/<org>_m_<repo>:pr-<number>`, lowercased);
 * a SWE-smith task names its own image in its `image_name`.
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
