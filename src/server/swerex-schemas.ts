/**
 * The request bodies of SWE-ReX's remote runtime protocol (its `runtime/abstract.py` pydantic
 * models), as zod schemas with the same field names and defaults. Like pydantic's BaseModel they
 * ignore fields they do not know (clients of other SWE-ReX versions send a few more or fewer) and
 * take numbers and booleans leniently, as pydantic's lax mode does.
 */
import { z } from 'zod';

/** A float as pydantic takes one: a JSON number or a numeric string. */
const PyFloat = z.union([
  z.number(),
  z
    .string()
    .regex(/^\s*[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?\s*$/, 'a number')
    .transform(Number),
]);

const TRUE_WORDS = new Set(['1', 'true', 't', 'yes', 'y', 'on']);
const FALSE_WORDS = new Set(['0', 'false', 'f', 'no', 'n', 'off']);

/** A bool as pydantic takes one: true/false, 0/1, or the words pydantic accepts ("true", "off", ...). */
export const PyBool = z.union([
  z.boolean(),
  z.union([z.literal(0), z.literal(1)]).transform((n) => n === 1),
  z
    .string()
    .refine((s) => TRUE_WORDS.has(s.trim().toLowerCase()) || FALSE_WORDS.has(s.trim().toLowerCase()), 'a boolean (true/false, 1/0, yes/no, on/off)')
    .transform((s) => TRUE_WORDS.has(s.trim().toLowerCase())),
]);

/** A path inside the sandbox (relative ones resolve against its workdir). */
const PathText = z
  .string()
  .min(1)
  .refine((p) => !p.includes('\0'), 'may not contain NUL');

const SessionName = z.string().min(1).max(256).default('default');

export const CreateBashSessionRequestSchema = z.object({
  startup_source: z.array(PathText).default([]),
  session: SessionName,
  session_type: z.literal('bash').default('bash'),
  startup_timeout: PyFloat.pipe(z.number().positive()).default(1.0),
});
export type CreateBashSessionRequest = z.output<typeof CreateBashSessionRequestSchema>;

export const BashActionSchema = z.object({
  command: z.string(),
  session: SessionName,
  timeout: PyFloat.pipe(z.number().positive()).nullable().default(null),
  is_interactive_command: PyBool.default(false),
  is_interactive_quit: PyBool.default(false),
  check: z.enum(['silent', 'raise', 'ignore']).default('raise'),
  error_msg: z.string().default(''),
  expect: z.array(z.string()).default([]),
  action_type: z.literal('bash').default('bash'),
});
export type BashAction = z.output<typeof BashActionSchema>;

export const BashInterruptActionSchema = z.object({
  session: SessionName,
  timeout: PyFloat.pipe(z.number().positive()).default(0.2),
  n_retry: z.number().int().min(1).max(100).default(3),
  expect: z.array(z.string()).default([]),
  action_type: z.literal('bash_interrupt'),
});
export type BashInterruptAction = z.output<typeof BashInterruptActionSchema>;

/** SWE-ReX's `Action` union, told apart by `action_type` (a body without one is a BashAction, its default). */
export const ActionSchema = z.union([BashInterruptActionSchema, BashActionSchema]);

export const CloseBashSessionRequestSchema = z.object({
  session: SessionName,
  session_type: z.literal('bash').default('bash'),
});

export const CommandSchema = z.object({
  command: z.union([z.string(), z.array(z.string()).min(1)]),
  timeout: PyFloat.pipe(z.number().positive()).nullable().default(null),
  shell: PyBool.default(false),
  check: PyBool.default(false),
  error_msg: z.string().default(''),
  env: z.record(z.string(), z.string()).nullable().default(null),
  cwd: PathText.nullable().default(null),
  merge_output_streams: PyBool.default(false),
});
export type Command = z.output<typeof CommandSchema>;

export const ReadFileRequestSchema = z.object({
  path: PathText,
  encoding: z.string().nullable().default(null),
  errors: z.string().nullable().default(null),
});

export const WriteFileRequestSchema = z.object({
  content: z.string(),
  path: PathText,
});

/** The form fields of `/upload` besides the file itself. */
export const UploadFieldsSchema = z.object({
  target_path: PathText,
  unzip: PyBool.default(false),
});
