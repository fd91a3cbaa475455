/**
 * deploy/kubernetes/ against the code it deploys (no cluster or kubectl here): every file parses
 * as Kubernetes objects in one namespace, kustomization names them all, the Service, Secret and
 * probes point at what the DaemonSet's pod has, every flag of its command line is one `serve`
 * takes, and its probes answer as the kubelet needs from a real server: no token, 200 when live,
 * 503 to the readiness path while not ready. Every object is also checked against the Kubernetes
 * API itself (its schemas and, for misspelt fields, its types), as `kubectl apply --validate=strict`
 * would.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { Command } from 'commander';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseAllDocuments } from 'yaml';
import { registerServeCommand } from '../src/cli/serve-command.js';
import { type KubeObject, kubernetesApiProblems } from './helpers/kubernetes-api-check.js';
import { REPO_ROOT } from './helpers/sandbox-testkit.js';
import { ServerFixture } from './helpers/server-fixture.js';

const DIR = join(REPO_ROOT, 'deploy', 'kubernetes');

type Obj = { apiVersion: string; kind: string; metadata: { name: string; namespace?: string; labels?: Record<string, string> }; [k: string]: unknown };

function load(file: string): Obj[] {
  return parseAllDocuments(readFileSync(join(DIR, file), 'utf8')).map((d) => {
    expect(d.errors, file).toEqual([]);
    return d.toJS() as Obj;
  });
}

const files = readdirSync(DIR).filter((f) => f.endsWith('.yaml'));
const all = new Map(files.map((f) => [f, load(f)]));
const one = (kind: string): Obj => [...all.values()].flat().find((o) => o.kind === kind)!;

// the parts of a pod spec this test reads
type Container = {
  args: string[];
  command: string[];
  env: Array<{ name: string; value?: string; valueFrom?: { fieldRef?: { fieldPath: string }; secretKeyRef?: { name: string; key: string } } }>;
  ports: Array<{ name: string; containerPort: number }>;
  readinessProbe: { httpGet: { path: string; port: string } };
  livenessProbe: { httpGet: { path: string; port: string } };
  startupProbe: { httpGet: { path: string; port: string } };
  securityContext: { privileged?: boolean };
  volumeMounts: Array<{ name: string; mountPath: string }>;
};
const ds = one('DaemonSet') as Obj & {
  spec: {
    selector: { matchLabels: Record<string, string> };
    template: {
      metadata: { labels: Record<string, string>; annotations: Record<string, string> };
      spec: { containers: Container[]; volumes: Array<{ name: string; hostPath?: { path: string } }> };
    };
  };
};
const pod = ds.spec.template;
const serve = pod.spec.containers[0]!;

describe('deploy/kubernetes', () => {
  it('parses as Kubernetes objects of one namespace, all named by the kustomization', () => {
    expect(files.sort()).toEqual(['build-indexed-job.yaml', 'daemonset.yaml', 'kustomization.yaml', 'namespace.yaml', 'secret.yaml', 'service.yaml']);
    for (const [file, objs] of all) {
      for (const o of objs) {
        expect([file, typeof o.apiVersion, typeof o.kind]).toEqual([file, 'string', 'string']);
        if (o.kind === 'Kustomization' || o.kind === 'Namespace') continue;
        expect([file, o.kind, o.metadata.namespace]).toEqual([file, o.kind, 'minisandbox']);
      }
    }
    expect(one('Namespace').metadata).toMatchObject({ name: 'minisandbox', labels: { 'pod-security.kubernetes.io/enforce': 'privileged' } });
    expect((one('Kustomization') as Obj & { resources: string[] }).resources.sort()).toEqual([
      'daemonset.yaml',
      'namespace.yaml',
      'secret.yaml',
      'service.yaml',
    ]);
    const job = one('Job') as Obj & { spec: { completionMode: string; completions: number } };
    expect(job.spec.completionMode).toBe('Indexed');
    expect(readFileSync(join(DIR, 'build-indexed-job.yaml'), 'utf8')).toContain(`--shard "\${JOB_COMPLETION_INDEX}/${job.spec.completions}"`);
  });

  it('is valid against the Kubernetes API, with no unknown or misspelt field', () => {
    const objects = [...all]
      .flatMap(([file, objs]) => objs.map((o, i) => ({ label: `${file}#${i} ${o.kind}`, object: o as KubeObject })))
      .filter((o) => o.object.kind !== 'Kustomization'); // kustomize's, not the API server's
    expect(objects.length).toBe(6);
    expect(kubernetesApiProblems(objects, REPO_ROOT)).toEqual([]);

    // the check itself finds what a cluster would refuse (a port by name) or silently drop (a
    // misspelt probe); one fault per copy, as a type check reports one error per literal
    type Pod = { spec: { template: { spec: { containers: Array<Record<string, unknown> & { ports: Array<Record<string, unknown>> }> } } } };
    const misspelt = structuredClone(ds) as unknown as Pod;
    const c = misspelt.spec.template.spec.containers[0]!;
    c.readinesProbe = c.readinessProbe;
    delete c.readinessProbe;
    const namedPort = structuredClone(ds) as unknown as Pod;
    namedPort.spec.template.spec.containers[0]!.ports[0]!.containerPort = 'http';
    const broken = (label: string, o: Pod) => kubernetesApiProblems([{ label, object: o as unknown as KubeObject }], REPO_ROOT);
    expect(broken('misspelt', misspelt)).toEqual([expect.stringMatching(/^misspelt: .*'readinesProbe' does not exist/)]);
    expect(broken('port', namedPort)).toEqual([
      'port: data/spec/template/spec/containers/0/ports/0/containerPort must be integer',
      expect.stringMatching(/^port: Type 'string' is not assignable to type 'number'/),
    ]);
  }, 60_000);

  it('has the DaemonSet, Service, Secret and probes agree with each other and with serve', () => {
    expect(ds.spec.selector.matchLabels).toEqual(pod.metadata.labels);
    const svc = one('Service') as Obj & { spec: { clusterIP: string; selector: Record<string, string>; ports: Array<{ port: number; targetPort: string }> } };
    expect(svc.spec.clusterIP).toBe('None'); // headless: one DNS record per ready pod
    expect(svc.spec.selector).toEqual(pod.metadata.labels);
    const port = serve.ports.find((p) => p.name === svc.spec.ports[0]!.targetPort)!;
    expect(port.containerPort).toBe(svc.spec.ports[0]!.port);
    expect(pod.metadata.annotations).toEqual({
      'prometheus.io/scrape': 'true',
      'prometheus.io/port': String(port.containerPort),
      'prometheus.io/path': '/metrics',
    });
    expect(serve.args).toContain(`0.0.0.0:${port.containerPort}`);
    for (const p of [serve.readinessProbe, serve.livenessProbe, serve.startupProbe]) expect(p.httpGet.port).toBe(port.name);
    expect(serve.readinessProbe.httpGet.path).toBe('/v1/health?ready=1');
    expect(serve.livenessProbe.httpGet.path).toBe('/v1/health');
    expect(serve.securityContext.privileged).toBe(true);

    const env = new Map(serve.env.map((e) => [e.name, e]));
    expect(env.get('MINISANDBOX_NODE_NAME')?.valueFrom?.fieldRef?.fieldPath).toBe('spec.nodeName');
    const tokenRef = env.get('MINISANDBOX_TOKEN')?.valueFrom?.secretKeyRef;
    const secret = [...all.values()].flat().find((o) => o.kind === 'Secret' && o.metadata.name === tokenRef?.name) as Obj & {
      stringData: Record<string, string>;
    };
    expect(Object.keys(secret.stringData)).toContain(tokenRef!.key);
    // the store is the hostPath volume
    const store = serve.args[serve.args.indexOf('--store') + 1]!;
    const mount = serve.volumeMounts.find((m) => store.startsWith(`${m.mountPath}/`))!;
    expect(pod.spec.volumes.find((v) => v.name === mount.name)?.hostPath?.path).toBe('/var/lib/minisandbox');

    // every flag after `serve` is one the serve command takes
    const program = new Command();
    registerServeCommand(
      program,
      () => ({}),
      () => undefined,
    );
    const takes = new Set(program.commands[0]!.options.map((o) => o.long));
    const args = serve.args.slice(serve.args.indexOf('serve') + 1);
    const flags = args.filter((a) => a.startsWith('--'));
    expect(flags.length).toBeGreaterThan(3);
    for (const f of flags) expect([f, takes.has(f)]).toEqual([f, true]);
  });
});

describe('the probes, against a real server', () => {
  const fx = new ServerFixture();
  beforeAll(() => fx.setUp(), 120_000);
  afterAll(() => fx.tearDown());

  it('answer without a token: liveness 200, readiness 200 when ready', async () => {
    for (const p of [serve.livenessProbe, serve.readinessProbe, serve.startupProbe]) {
      const r = await fetch(`${fx.srv.url}${p.httpGet.path}`);
      expect([p.httpGet.path, r.status]).toEqual([p.httpGet.path, 200]);
    }
    expect((await fetch(`${fx.srv.url}/metrics`)).status).toBe(401);
  });
});
