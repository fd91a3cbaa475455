/**
 * The runtime config an environment built from a plan node gets (pure). As with Dockerfile ENV,
 * variables set by an env recipe hold for the commands of every recipe above it and at run time;
 * an upper recipe overrides a lower one. The workdir is the top recipe's; an instance's test
 * command and log parser come from the specs.
 */
import { type RuntimeConfig, RuntimeConfigSchema } from '../layer/env.js';
import type { PlanNode } from './plan.js';

function chainOf(index: ReadonlyMap<string, PlanNode>, id: string): PlanNode[] {
  const chain: PlanNode[] = [];
  for (let n = index.get(id); n !== undefined; n = n.parent === null ? undefined : index.get(n.parent)) chain.unshift(n);
  return chain;
}

/**
 * Variables in effect for node `id`'s build commands and its environment. `inherited` is the env of
 * a registry-ref parent at the bottom of the chain (its EnvConfig's `config.env`), if any.
 */
export function effectiveEnv(index: ReadonlyMap<string, PlanNode>, id: string, inherited: Record<string, string> = {}): Record<string, string> {
  const env = { ...inherited };
  for (const n of chainOf(index, id)) if ('env' in n.recipe) Object.assign(env, n.recipe.env);
  return env;
}

export function runtimeConfigFor(index: ReadonlyMap<string, PlanNode>, id: string, inherited?: RuntimeConfig): RuntimeConfig {
  const node = index.get(id);
  const workdir = node && 'workdir' in node.recipe ? node.recipe.workdir : (inherited?.workdir ?? '/');
  const labels: Record<string, string> = { ...(inherited?.labels ?? {}) };
  if (node?.kind === 'instance') labels['minisandbox.instance_id'] = node.label;
  if (node?.test) labels['minisandbox.log_parser'] = node.test.logParser;
  return RuntimeConfigSchema.parse({
    workdir,
    env: effectiveEnv(index, id, inherited?.env),
    user: inherited?.user,
    hostname: inherited?.hostname,
    testCmd: node?.test?.testCmd ?? inherited?.testCmd,
    labels,
  });
}
