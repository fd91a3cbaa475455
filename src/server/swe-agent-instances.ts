/**
 * A SWE-agent instances file (`--instances.type expert_file`: a list of its BatchInstance, i.e.
 * `{env: EnvironmentConfig, problem_statement: ProblemStatementConfig}`) for a dataset, each
 * instance on a minisandbox server through SWE-ReX's RemoteDeployment at the instance's `inst:`
 * key. The shapes follow SWE-agent's and SWE-ReX's pydantic models (most forbid unknown fields).
 */
import { z } from 'zod';
import { InvalidInputError } from '../errors.js';
import type { LocatedRow } from '../dataset/row.js';

const RemoteDeploymentSchema = z.strictObject({
  type: z.literal('remote'),
  host: z.string(),
  port: z.null(),
  auth_token: z.string(),
  /** SWE-ReX's client timeout, in seconds, for is_alive and close (its default, 0.15, is for a local server). */
  timeout: z.number().positive(),
});

const PreExistingRepoSchema = z.strictObject({
  type: z.literal('preexisting'),
  /** The repository's directory at the root of the environment (`/testbed` -> `testbed`). */
  repo_name: z.string(),
  base_commit: z.string(),
});

const TextProblemStatementSchema = z.strictObject({
  type: z.literal('text'),
  text: z.string(),
  id: z.string(),
  extra_fields: z.record(z.string(), z.unknown()),
});

export const SweAgentInstanceSchema = z.strictObject({
  env: z.strictObject({
    deployment: RemoteDeploymentSchema,
    repo: PreExistingRepoSchema,
  }),
  problem_statement: TextProblemStatementSchema,
});
export type SweAgentInstance = z.output<typeof SweAgentInstanceSchema>;

export interface InstancesOptions {
  /** The dataset's tag prefix: environments are `<dataset>/<instance_id>`. */
  dataset: string;
  /** The server as SWE-agent reaches it, e.g. `http://node1:7000`. */
  server: string;
  token: string;
  repoName: string;
  timeoutS: number;
}

/** The SWE-ReX host of one instance: its `inst:` key on the server. */
export function instanceHost(server: string, dataset: string, instanceId: string): string {
  return `${server.replace(/\/+$/, '')}/swerex/inst:${dataset}:${instanceId}`;
}

export function sweAgentInstances(rows: LocatedRow[], o: InstancesOptions): SweAgentInstance[] {
  return rows.map(({ row, where }) => {
    const text = (row as { problem_statement?: unknown }).problem_statement;
    if (typeof text !== 'string')
      throw new InvalidInputError(
        `${where}: instance ${row.instance_id} has no problem_statement`,
        'SWE-agent needs the issue text: use SWE-bench rows, which have it',
      );
    return SweAgentInstanceSchema.parse({
      env: {
        deployment: { type: 'remote', host: instanceHost(o.server, o.dataset, row.instance_id), port: null, auth_token: o.token, timeout: o.timeoutS },
        repo: { type: 'preexisting', repo_name: o.repoName, base_commit: row.base_commit },
      },
      problem_statement: { type: 'text', text, id: row.instance_id, extra_fields: {} },
    });
  });
}
