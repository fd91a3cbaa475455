/**
 * Checks manifests against the Kubernetes API without a cluster, as `kubectl apply
 * --validate=strict` would: each object against its kind's OpenAPI schema (kubernetes-models'
 * compiled validators: types, enums, required fields, int-or-string), and against the API's
 * TypeScript interfaces, whose excess-property check is what finds a misspelt field (the OpenAPI
 * schemas leave unknown fields open, and an API server drops them silently unless asked to be
 * strict, so a typo such as `readinesProbe` would deploy a pod without its probe).
 */
import { join } from 'node:path';
import { DaemonSet } from 'kubernetes-models/apps/v1/DaemonSet';
import { Job } from 'kubernetes-models/batch/v1/Job';
import { Namespace } from 'kubernetes-models/v1/Namespace';
import { Secret } from 'kubernetes-models/v1/Secret';
import { Service } from 'kubernetes-models/v1/Service';
import ts from 'typescript';

export type KubeObject = { apiVersion: string; kind: string; [k: string]: unknown };

/** Kind → its model class and the module and interface the type check names. */
const KINDS = {
  DaemonSet: { model: DaemonSet, module: 'kubernetes-models/apps/v1/DaemonSet', iface: 'IDaemonSet' },
  Job: { model: Job, module: 'kubernetes-models/batch/v1/Job', iface: 'IJob' },
  Namespace: { model: Namespace, module: 'kubernetes-models/v1/Namespace', iface: 'INamespace' },
  Secret: { model: Secret, module: 'kubernetes-models/v1/Secret', iface: 'ISecret' },
  Service: { model: Service, module: 'kubernetes-models/v1/Service', iface: 'IService' },
} as const;
type Kind = keyof typeof KINDS;

export const CHECKED_KINDS: readonly string[] = Object.keys(KINDS);

function isKind(k: string): k is Kind {
  return Object.hasOwn(KINDS, k);
}

/** Every problem found, one line each (`<label>: <what>`); empty when all objects are valid. */
export function kubernetesApiProblems(objects: ReadonlyArray<{ label: string; object: KubeObject }>, repoRoot: string): string[] {
  const problems: string[] = [];
  const typed: Array<{ label: string; object: KubeObject; kind: Kind }> = [];
  for (const { label, object } of objects) {
    const kind = object.kind;
    if (!isKind(kind)) {
      problems.push(`${label}: kind ${kind} is not one this check knows (${CHECKED_KINDS.join(', ')})`);
      continue;
    }
    try {
      // validate() throws with the schema path of each violation
      new KINDS[kind].model(object as never).validate();
    } catch (e) {
      problems.push(`${label}: ${(e as Error).message}`);
    }
    typed.push({ label, object, kind });
  }
  problems.push(...typeProblems(typed, repoRoot));
  return problems;
}

/** Type-checks `const o: I<Kind> = <object>` for every object in one in-memory program. */
function typeProblems(objects: ReadonlyArray<{ label: string; object: KubeObject; kind: Kind }>, repoRoot: string): string[] {
  if (objects.length === 0) return [];
  // a virtual file inside the repository, so `kubernetes-models` resolves from its node_modules
  const file = join(repoRoot, 'test', '__kubernetes-api-check__.ts');
  const kinds = [...new Set(objects.map((o) => o.kind))];
  const lines = kinds.map((k) => `import type { ${KINDS[k].iface} } from '${KINDS[k].module}';`);
  const labels: string[] = [];
  objects.forEach(({ label, object, kind }, i) => {
    labels[lines.length] = label;
    lines.push(`export const o${i}: ${KINDS[kind].iface} = ${literal(object)};`);
  });
  const source = lines.join('\n');
  const options: ts.CompilerOptions = {
    strict: true,
    noEmit: true,
    skipLibCheck: true,
    target: ts.ScriptTarget.ES2022,
    module: ts.ModuleKind.NodeNext,
    moduleResolution: ts.ModuleResolutionKind.NodeNext,
    types: [],
  };
  const host = ts.createCompilerHost(options);
  const { getSourceFile, fileExists, readFile } = host;
  host.getSourceFile = (name, lang, ...rest) => (name === file ? ts.createSourceFile(name, source, lang) : getSourceFile.call(host, name, lang, ...rest));
  host.fileExists = (name) => name === file || fileExists.call(host, name);
  host.readFile = (name) => (name === file ? source : readFile.call(host, name));
  const program = ts.createProgram([file], options, host);
  return ts
    .getPreEmitDiagnostics(program)
    .filter((d) => d.file?.fileName === file || d.file === undefined)
    .map((d) => {
      const line = d.file && d.start !== undefined ? d.file.getLineAndCharacterOfPosition(d.start).line : -1;
      const message = ts.flattenDiagnosticMessageText(d.messageText, '\n').split('\n').slice(-1)[0];
      return `${labels[line] ?? 'imports'}: ${message}`;
    });
}

/** A TypeScript literal of a YAML value, keys bare where they can be, so messages name them plainly. */
function literal(v: unknown): string {
  if (Array.isArray(v)) return `[${v.map(literal).join(', ')}]`;
  if (v !== null && typeof v === 'object') {
    const key = (k: string) => (/^[A-Za-z_$][\w$]*$/.test(k) ? k : JSON.stringify(k));
    return `{ ${Object.entries(v)
      .map(([k, x]) => `${key(k)}: ${literal(x)}`)
      .join(', ')} }`;
  }
  return JSON.stringify(v) ?? 'undefined';
}
