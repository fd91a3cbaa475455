/**
 * zod compiles a parser (`new Function`) for each object schema the first time it parses with it:
 * worth it for a process that parses with that schema many times, pure cost for one that parses
 * each once. A sandboxed command's start parses about ten schemas once each; interpreting them
 * saves ~6 ms of a one-shot `run` (bench/cli.ts). The setting is read when a schema is built, so it
 * must come before the command's modules are loaded.
 */
import { z } from 'zod';

export function interpretSchemas(): void {
  z.config({ jitless: true });
}
