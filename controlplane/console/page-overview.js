// Overview: the fleet at a glance (GET /v1/admin/health and /v1/admin/snapshot).
import * as api from './api.js';
import { el, section, table, badge, fmtMs } from './dom.js';

function kv(pairs) {
  return el('dl.kv', {}, pairs.map(([k, v]) => [el('dt', { text: k }), el('dd', {}, v)]));
}

export async function render(root) {
  const [health, snap] = await Promise.all([api.get('/v1/admin/health'), api.get('/v1/admin/snapshot')]);
  const hj = health.json;
  const sj = snap.json;
  const fleet = hj.fleet || {};
  root.append(el('div.grid', {},
    section('Control plane',
      kv([
        ['Status', badge(hj.status)],
        ['PostgreSQL', badge(hj.postgres || sj.database)],
        ['Configuration version', String(hj.config_version)],
        ['Master key', hj.master_key?.configured ? `configured (${hj.master_key.id})` : 'not configured'],
        ['This replica', `${hj.replica_id}${hj.leader?.self ? ' (leader)' : ''}`],
        ['Leader', hj.leader?.id ?? 'unknown'],
        ['etcd', [badge(hj.etcd?.state || 'off'), hj.etcd?.last_error ? ` ${hj.etcd.last_error}` : '']],
      ])),
    section('Snapshot',
      kv([
        ['Version built', String(sj.version)],
        ['Published', String(sj.published_version)],
        ['Built at', fmtMs(sj.built_at_ms)],
        ['Builds / failed', `${sj.builds} / ${sj.failed_builds}`],
        ['Last error', sj.last_error ? el('span.bad', { text: sj.last_error }) : 'none'],
        ['Unresolved credentials', sj.unresolved?.length ? sj.unresolved.map((u) => `${u.provider}: ${u.reason}`).join('; ') : 'none'],
        ['Routes left out', sj.skipped_routes?.length ? sj.skipped_routes.join(', ') : 'none'],
      ]))));
  root.append(section('Control-plane replicas',
    table('Control-plane replicas registered', [
      ['Replica', (m) => m.id],
      ['Role', (m) => (m.id === hj.leader?.id ? badge('leader', 'ok') : 'follower')],
      ['Admin', (m) => m.admin],
      ['gRPC', (m) => m.grpc],
      ['Started', (m) => fmtMs(m.started_at_ms)],
      ['Schema', (m) => String(m.schema_version)],
    ], hj.members || [])));
  const acked = new Map((sj.replicas || []).map((r) => [r.replica_id, r]));
  root.append(section('Data planes',
    table('Data planes connected', [
      ['Replica', (r) => r.replica_id],
      ['Control plane', (r) => r.control_plane],
      ['Connected', (r) => badge(r.connected ? 'connected' : 'disconnected', r.connected ? 'ok' : 'down')],
      ['Snapshot', (r) => `${r.snapshot_version}${r.snapshot_version === sj.version ? ' (current)' : ` (behind ${sj.version})`}`],
      ['Acknowledged', (r) => fmtMs(acked.get(r.replica_id)?.acked_at_ms)],
      ['Health view', (r) => String(r.view_version)],
      ['Last seen', (r) => fmtMs(r.last_seen_ms)],
    ], hj.replicas || [], { empty: 'No data plane is connected.' })));
  root.append(section(`Targets (fleet view ${fleet.version ?? '?'}, decided by ${fleet.decided_by ?? '?'}, ${fleet.window_s ?? '?'} s window)`,
    table('Targets the data planes reported', [
      ['Target', (t) => `${t.provider}/${t.model}`],
      ['State', (t) => badge(t.state)],
      ['Reasons', (t) => (t.reasons || []).join(', ') || '—'],
      ['Attempts ok/failed', (t) => `${t.window?.ok ?? 0} / ${t.window?.failed ?? 0}`],
      ['Latency p50/p99', (t) => (t.window?.latency_ms ? `${t.window.latency_ms.p50} / ${t.window.latency_ms.p99} ms` : '—')],
      ['Probe', (t) => (t.probe ? `${t.probe.replica_id} until ${fmtMs(t.probe.until_ms)}` : (t.next_probe_ms ? `next ${fmtMs(t.next_probe_ms)}` : '—'))],
      ['Breakers', (t) => (t.replicas || []).map((r) => `${r.replica_id}: ${r.breaker}`).join(', ') || '—'],
    ], fleet.targets || [], { empty: 'No target was reported in the window.' })));
  root.append(section('Provider credentials',
    table('Whether each provider\'s credential resolves', [
      ['Provider', (p) => p.name],
      ['Enabled', (p) => (p.enabled ? 'yes' : 'no')],
      ['Credential', (p) => badge(p.credential)],
      ['Reason', (p) => p.reason || '—'],
    ], hj.providers || [])));
  root.append(section('Singleton jobs',
    table('Jobs run by the leader', [
      ['Job', (j) => j.name],
      ['Every', (j) => `${Math.round(j.interval_ms / 1000)} s`],
      ['Runs / failures', (j) => `${j.runs} / ${j.failures}`],
      ['Last run', (j) => fmtMs(j.last_run_ms)],
      ['Last result', (j) => (j.last_ok ? badge('ok') : el('span.bad', { text: j.last_error || 'failed' }))],
    ], hj.jobs || [])));
}
