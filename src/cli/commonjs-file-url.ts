/**
 * `import.meta.url` in the CLI's CommonJS build (bin/build-cli.mjs injects this module and
 * defines import.meta.url as its export): the URL of the file the code runs from.
 */
import { pathToFileURL } from 'node:url';

export const commonjsFileUrl: string = pathToFileURL(__filename).href;
