/** `--instances`, `--instances-file`, `--instances-regex`: one definition for every command that takes a dataset. */
import type { Command } from 'commander';
import { type InstanceSelection, loadSelection } from '../dataset/select.js';

export interface SelectionFlags {
  instances?: string;
  instancesFile?: string;
  instancesRegex?: string;
}

export function addSelectionOptions(cmd: Command): Command {
  return cmd
    .option('--instances <ids|/regex/>', 'only these instances: ID[,ID...] or /regex/ over instance ids (unknown ids are an error)')
    .option('--instances-file <file>', 'only the instances listed in a file (one id per line)')
    .option('--instances-regex <regex>', 'only instances whose id matches the regex');
}

export function selectionFrom(o: SelectionFlags): Promise<InstanceSelection | null> {
  return loadSelection({ instances: o.instances, instancesFile: o.instancesFile, instancesRegex: o.instancesRegex });
}
