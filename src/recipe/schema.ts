/**
 * Recipe file formats (YAML or JSON): how to build one layer. Three kinds:
 *   base      a root filesystem: debootstrap, a rootfs tarball, a directory, or a static busybox
 *   env       commands run as root in a build sandbox on top of a parent, network on
 *   instance  a git repository checked out at a commit into a workdir, plus post-checkout commands
 * Relative paths in a recipe resolve against the directory of the file that holds it.
 */
import { z } from 'zod';
import { RefNameSchema } from '../cas/ref-name.js';

export const AbsolutePathSchema = z.string().startsWith('/', 'expected an absolute path (starting with /)');

export const CommandSchema = z.string().min(1, 'expected a non-empty shell command');

/** YAML turns `FOO: 1` into a number; an environment value is always a string. */
export const EnvVarsSchema = z.record(
  z.string().regex(/^[A-Za-z_][A-Za-z0-9_]*$/, 'expected an environment variable name'),
  z.union([z.string(), z.number(), z.boolean()]).transform(String),
);

/** A parent layer: another recipe file (a bare string is a recipe path) or a registry ref. */
export const ParentSchema = z.union([
  z
    .string()
    .min(1)
    .transform((recipe) => ({ recipe })),
  z.strictObject({ recipe: z.string().min(1) }),
  z.strictObject({ ref: RefNameSchema }),
]);
export type Parent = z.output<typeof ParentSchema>;

const PackageNameSchema = z.string().regex(/^[a-z0-9][a-z0-9+.-]+(:[a-z0-9]+)?$/, 'expected a Debian package name');

export const DebootstrapSourceSchema = z.strictObject({
  type: z.literal('debootstrap'),
  suite: z.string().min(1).default('bookworm'),
  variant: z.enum(['minbase', 'buildd', 'fakechroot', '-']).default('minbase'),
  /** minbase lacks gpgv, without which apt refuses signed indexes: recipes usually include it. */
  include: z.array(PackageNameSchema).default([]),
  mirror: z.url().default('http://deb.debian.org/debian'),
  arch: z.string().min(1).optional(),
});

export const TarballSourceSchema = z.strictObject({
  type: z.literal('tarball'),
  path: z.string().min(1),
});

export const DirectorySourceSchema = z.strictObject({
  type: z.literal('directory'),
  path: z.string().min(1),
});

/** A static busybox binary (Debian's busybox-static) plus its applet links: a tiny base for hermetic tests. */
export const BusyboxSourceSchema = z.strictObject({
  type: z.literal('busybox'),
  path: z.string().min(1).default('/bin/busybox'),
});

export const BaseSourceSchema = z.discriminatedUnion('type', [DebootstrapSourceSchema, TarballSourceSchema, DirectorySourceSchema, BusyboxSourceSchema]);
export type BaseSource = z.output<typeof BaseSourceSchema>;

export const BaseRecipeSchema = z.strictObject({
  kind: z.literal('base'),
  name: z.string().optional(),
  from: BaseSourceSchema,
});
export type BaseRecipe = z.output<typeof BaseRecipeSchema>;

/** Octal as chmod spells it (`0644`, `755`); a string, since YAML would read 0644 as decimal. */
const FileModeSchema = z
  .string()
  .regex(/^0?[0-7]{3,4}$/, 'expected an octal mode such as "0644"')
  .transform((s) => parseInt(s, 8));

export const CopyFileSchema = z.strictObject({
  /** Relative to the recipe file; a file or a directory (copied recursively). */
  src: z.string().min(1),
  dest: AbsolutePathSchema,
  /** Defaults to the source's own permission bits. */
  mode: FileModeSchema.optional(),
});
export type CopyFile = z.output<typeof CopyFileSchema>;

export const EnvRecipeSchema = z.strictObject({
  kind: z.literal('env'),
  name: z.string().optional(),
  parent: ParentSchema,
  /** Run in order with `shell -c`, as root in the build sandbox; the first failure fails the build. */
  commands: z.array(CommandSchema).default([]),
  /** Set for the commands and kept in the environment's runtime config. */
  env: EnvVarsSchema.default({}),
  /** Copied into the layer before the commands run. */
  files: z.array(CopyFileSchema).default([]),
  workdir: AbsolutePathSchema.default('/'),
  network: z.boolean().default(true),
  /**
   * With network, the commands get the host's proxy variables and CA certificates, so they reach
   * registries as the host does (see builder/host-network.ts); false: the sandbox's own settings only.
   */
  hostNetworkSettings: z.boolean().optional(),
  shell: AbsolutePathSchema.default('/bin/sh'),
});
export type EnvRecipe = z.output<typeof EnvRecipeSchema>;

export const RepoSourceSchema = z.union([
  z.strictObject({ path: z.string().min(1) }),
  z.strictObject({ mirror: z.string().min(1) }),
  z.strictObject({ url: z.string().min(1) }),
]);
export type RepoSource = z.output<typeof RepoSourceSchema>;

export const CommitSchema = z.string().regex(/^([0-9a-f]{40}|[0-9a-f]{64})$/, 'expected a full commit id (40 or 64 lowercase hex digits)');

export const InstanceRecipeSchema = z.strictObject({
  kind: z.literal('instance'),
  name: z.string().optional(),
  parent: ParentSchema,
  /** `owner/name` as in SWE-bench; part of the key (the source location is not: the commit pins content). */
  repoName: z.string().min(1).optional(),
  repo: RepoSourceSchema,
  commit: CommitSchema,
  workdir: AbsolutePathSchema.default('/testbed'),
  /** Post-checkout commands (e.g. an editable install), run in `workdir`. */
  commands: z.array(CommandSchema).default([]),
  env: EnvVarsSchema.default({}),
  shell: AbsolutePathSchema.default('/bin/sh'),
  /** As an env recipe's: false keeps the host's proxy variables and CA certificates out of the commands. */
  hostNetworkSettings: z.boolean().optional(),
  /**
   * Store the history up to `base` (an ancestor of `commit` shared by many instances) as a bare
   * repository at `path`, which the checkout borrows objects from: byte-identical across the
   * instances that share `base`, so the registry keeps it once. See makeSharedHistory.
   */
  history: z
    .strictObject({
      base: CommitSchema,
      path: AbsolutePathSchema,
      /**
       * The history between `base` and `commit`, as packs of other instances' commits: for each
       * dataset commit that is an ancestor of `commit` (and `commit` itself), in topological order,
       * the objects reachable from it and not from `after` (its nearest ancestors among them, or
       * `base`). Each such pack is the same bytes in every instance layer that holds it, so the
       * registry keeps it once and an instance adds only its own segment. Absent: fetched whole.
       */
      segments: z.array(z.strictObject({ commit: CommitSchema, after: z.array(CommitSchema).min(1) })).optional(),
    })
    .optional(),
});
export type InstanceRecipe = z.output<typeof InstanceRecipeSchema>;

/**
 * The history a repository's instances share, as a layer of its own between their env and their
 * instance layers: a bare repository at `path` holding `base` and its ancestry (makeSharedHistory).
 * Plans make these from datasets (one per env and repository); instance layers above it borrow its
 * objects through git's alternates and add only their own commits.
 */
export const HistoryRecipeSchema = z.strictObject({
  kind: z.literal('history'),
  name: z.string().optional(),
  parent: ParentSchema,
  repoName: z.string().min(1).optional(),
  repo: RepoSourceSchema,
  base: CommitSchema,
  path: AbsolutePathSchema,
});
export type HistoryRecipe = z.output<typeof HistoryRecipeSchema>;

export const RecipeSchema = z.discriminatedUnion('kind', [BaseRecipeSchema, EnvRecipeSchema, InstanceRecipeSchema, HistoryRecipeSchema]);
export type Recipe = z.output<typeof RecipeSchema>;
export type RecipeKind = Recipe['kind'];
export const RECIPE_KINDS = ['base', 'env', 'history', 'instance'] as const satisfies readonly RecipeKind[];
