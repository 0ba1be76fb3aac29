// GET /metrics on the data plane: after a known set of requests
// (successes streamed and not, a failover, a mid-stream error, a no-route
// error, a breaker opening, three refusals of the quota step that a
// snapshot file can provoke: a budget never configured, an unpriced target
// under a fail_closed budget, a fail_closed rate limit with no control
// plane to allocate it), the exposition passes `promtool check metrics`
// and its counters and histogram counts are exactly what those requests
// make. Every route here has its own model names, so no other request of
// this file can touch the series asserted.

import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import * as h from './harness.mjs';
import { metricValue, parseExposition, promtoolCheck, scrapeMetrics } from './exposition.mjs';

const T = { timeout: 60_000 };
const MESSAGES = [{ role: 'user', content: 'count these words please' }];

const ROUTES = [
  { name: 'mt-ok', capability: 'chat', strategy: 'ordered', entries: [{ provider: 'mock', model: 'mt-ok-1' }] },
  // auth_failed: no retry, the next candidate answers
  {
    name: 'mt-fo', capability: 'chat', strategy: 'ordered',
    entries: [{ provider: 'mock', model: 'mt-fo-1#status=401' }, { provider: 'mock', model: 'mt-fo-2' }],
  },
  { name: 'mt-mid', capability: 'chat', strategy: 'ordered', entries: [{ provider: 'mock', model: 'mt-mid-1#drop_after=2' }] },
  // the last candidate is retried until its breaker opens (3 failures in a row)
  { name: 'mt-br', capability: 'chat', strategy: 'ordered', entries: [{ provider: 'mock', model: 'mt-br-1#status=503' }] },
  // refused by the quota step, never dispatched
  { name: 'mt-lim', capability: 'chat', strategy: 'ordered', entries: [{ provider: 'mock', model: 'mt-lim-1' }] },
];

// Keys the quota step refuses (file mode: no control plane grants leases).
const LIMIT_KEYS = {
  key_mt_nb: `llmgw-mt-nb-${h.randomId()}`, // its team requires a budget and has none
  key_mt_unpriced: `llmgw-mt-up-${h.randomId()}`, // fail_closed budget, no price for the target
  key_mt_rate: `llmgw-mt-rt-${h.randomId()}`, // fail_closed rate limit, nothing to allocate it
};

let mock;
let gw;

before(async () => {
  h.requireBinaries();
  mock = await h.startMock();
  const snapshot = h.makeSnapshot({ mockV1: mock.v1, extraRoutes: ROUTES });
  snapshot.teams = [{ name: 'demo' }, { name: 'mt-budgeted', require_budget: true }];
  for (const id of Object.keys(LIMIT_KEYS)) {
    snapshot.keys.push({ id, hash: h.sha256hex(LIMIT_KEYS[id]), status: 'active', ...(id === 'key_mt_nb' ? { team: 'mt-budgeted' } : {}) });
  }
  snapshot.limits = [
    { id: 'mt-cost-closed', scope_kind: 'key', scope: 'key_mt_unpriced', metric: 'cost', period: 'day', amount: 1_000_000_000_000, offline: 'fail_closed' },
    { id: 'mt-rpm-closed', scope_kind: 'key', scope: 'key_mt_rate', metric: 'requests', period: 'minute', amount: 10, offline: 'fail_closed' },
  ];
  gw = await h.startGateway({ mock, snapshot, args: ['--retry-base-ms', '10'] });
});

after(async () => {
  await h.stopAll();
});

const scrape = () => scrapeMetrics(gw.port);
const value = metricValue;

function chat(model, extra = {}) {
  return h.request(gw.port, { headers: h.AUTH, body: { model, messages: MESSAGES, ...extra } });
}

describe('GET /metrics', () => {
  let text;
  let samples;
  let okUsage;

  before(async () => {
    const ok = await chat('mt-ok');
    assert.equal(ok.status, 200, ok.text);
    okUsage = ok.json.usage;
    const s = await h.collectStream(gw.port, { headers: h.AUTH, body: { model: 'mt-ok', messages: MESSAGES, stream: true } });
    assert.equal(s.status, 200);
    const fo = await chat('mt-fo');
    assert.equal(fo.status, 200, fo.text);
    assert.equal(fo.headers['x-llmgw-attempts'], '2');
    const mid = await h.collectStream(gw.port, { headers: h.AUTH, body: { model: 'mt-mid', messages: MESSAGES, stream: true } });
    assert.equal(mid.status, 200);
    assert.match(mid.raw, /"error"/);
    const nr = await chat('mt-no-such-route');
    assert.equal(nr.status, 404, nr.text);
    for (const [id, status] of [['key_mt_nb', 402], ['key_mt_unpriced', 402], ['key_mt_rate', 429]]) {
      const r = await h.request(gw.port, {
        headers: { authorization: `Bearer ${LIMIT_KEYS[id]}` }, body: { model: 'mt-lim', messages: MESSAGES },
      });
      assert.equal(r.status, status, `${id}: ${r.text}`);
    }
    const br = await chat('mt-br');
    assert.equal(br.status, 502, br.text);
    assert.equal(br.headers['x-llmgw-attempts'], '3');
    // The breaker's callback may run on another thread: wait for its gauge.
    ({ text, samples } = await h.waitFor(async () => {
      const r = await scrape();
      return value(r.samples, 'llmgw_breaker_state', { provider: 'mock', model: 'mt-br-1#status=503' }) === 2 ? r : null;
    }, { what: 'llmgw_breaker_state 2 for mt-br-1' }));
  });

  test('promtool check metrics accepts the exposition', T, () => {
    promtoolCheck(text);
  });

  test('requests, attempts, failovers and retries count exactly', T, () => {
    const req = (route, provider, model, status, error_class) =>
      value(samples, 'llmgw_requests_total', { route, provider, model, status, error_class });
    assert.equal(req('mt-ok', 'mock', 'mt-ok-1', '200', 'none'), 2);
    assert.equal(req('mt-fo', 'mock', 'mt-fo-2', '200', 'none'), 1);
    assert.equal(req('mt-mid', 'mock', 'mt-mid-1#drop_after=2', '200', 'network'), 1);
    assert.equal(req('mt-br', 'mock', 'mt-br-1#status=503', '502', 'provider_5xx'), 1);
    assert.equal(req('', '', '', '404', 'model_not_found'), 1);

    const att = (route, model, outcome, error_class) =>
      value(samples, 'llmgw_attempts_total', { route, provider: 'mock', model, outcome, error_class });
    assert.equal(att('mt-ok', 'mt-ok-1', 'ok', 'none'), 2);
    assert.equal(att('mt-fo', 'mt-fo-1#status=401', 'failed', 'auth_failed'), 1);
    assert.equal(att('mt-fo', 'mt-fo-2', 'ok', 'none'), 1);
    assert.equal(att('mt-mid', 'mt-mid-1#drop_after=2', 'broke', 'network'), 1);
    assert.equal(att('mt-br', 'mt-br-1#status=503', 'failed', 'provider_5xx'), 3);

    assert.equal(value(samples, 'llmgw_failovers_total', { route: 'mt-fo' }), 1);
    assert.equal(value(samples, 'llmgw_failovers_total', { route: 'mt-ok' }), undefined);
    assert.equal(value(samples, 'llmgw_retries_total', { route: 'mt-br', provider: 'mock', model: 'mt-br-1#status=503' }), 2);
    assert.equal(value(samples, 'llmgw_no_route_total', { cause: 'model_not_found' }), 1);
  });

  test('limit refusals by cause, metric and period; the ledger gauges', T, () => {
    const ref = (cause, metric, period) => value(samples, 'llmgw_limit_refusals_total', { cause, metric, period });
    assert.equal(ref('budget_not_configured', 'cost', ''), 1);
    assert.equal(ref('budget_unpriced', 'cost', 'day'), 1);
    // 429 rate_limited to the client; to the operator, no allowance could be had
    assert.equal(ref('rate_unallocated', 'requests', 'minute'), 1);
    assert.equal(samples.filter((x) => x.name === 'llmgw_limit_refusals_total').length, 3);
    // file mode: no ledger, and nothing pending, spooled or dropped
    for (const name of ['llmgw_ledger_pending_rows', 'llmgw_ledger_spooled_rows', 'llmgw_ledger_spool_bytes', 'llmgw_ledger_rows_dropped_total']) {
      assert.equal(value(samples, name), 0, name);
    }
  });

  test('breaker state and transitions', T, () => {
    const target = { provider: 'mock', model: 'mt-br-1#status=503' };
    assert.equal(value(samples, 'llmgw_breaker_state', target), 2);
    assert.equal(value(samples, 'llmgw_breaker_transitions_total', { ...target, to: 'open' }), 1);
    // a target that never changed state has no series (it reads as closed)
    assert.equal(value(samples, 'llmgw_breaker_state', { provider: 'mock', model: 'mt-ok-1' }), undefined);
  });

  test('histogram counts, tokens, gauges', T, () => {
    const genai = { gen_ai_operation_name: 'chat', gen_ai_provider_name: 'openai', gen_ai_request_model: 'mt-ok-1' };
    assert.equal(value(samples, 'gen_ai_server_request_duration_seconds_count', { ...genai, error_type: '' }), 2);
    assert.equal(value(samples, 'gen_ai_server_request_duration_seconds_bucket', { ...genai, error_type: '', le: '+Inf' }), 2);
    // streamed answers only: one of the two
    assert.equal(value(samples, 'gen_ai_server_time_to_first_token_seconds_count', genai), 1);
    assert.equal(value(samples, 'gen_ai_server_time_per_output_token_seconds_count', genai), 1);
    assert.equal(value(samples, 'gen_ai_client_token_usage_count', { ...genai, gen_ai_token_type: 'input' }), 2);
    assert.equal(value(samples, 'gen_ai_client_token_usage_sum', { ...genai, gen_ai_token_type: 'output' }), 2 * okUsage.completion_tokens);
    assert.equal(value(samples, 'gen_ai_server_request_duration_seconds_count',
      { ...genai, gen_ai_request_model: 'mt-br-1#status=503', error_type: 'provider_5xx' }), 1);
    assert.equal(value(samples, 'llmgw_gateway_overhead_seconds_count', { route: 'mt-ok' }), 2);
    assert.equal(value(samples, 'llmgw_gateway_overhead_seconds_count', { route: 'mt-br' }), 1);
    const tok = (type) => value(samples, 'llmgw_tokens_total', { route: 'mt-ok', provider: 'mock', model: 'mt-ok-1', type });
    assert.equal(tok('input'), 2 * okUsage.prompt_tokens);
    assert.equal(tok('output'), 2 * okUsage.completion_tokens);
    assert.equal(value(samples, 'llmgw_open_streams', {}), 0);
    assert.equal(value(samples, 'llmgw_snapshot_version', {}), 1);
    const age = value(samples, 'llmgw_snapshot_age_seconds', {});
    assert.ok(age >= 0 && age < 600, `snapshot age ${age}`);
    // no series went past a cap
    for (const s of samples.filter((x) => x.name === 'llmgw_metrics_series_dropped_total')) assert.equal(s.value, 0, JSON.stringify(s));
  });

  test('no key is needed, and the scrape is not an API request', T, async () => {
    const r = await h.request(gw.port, { method: 'GET', path: '/metrics' });
    assert.equal(r.status, 200);
    const again = parseExposition(r.text);
    assert.equal(value(again, 'llmgw_requests_total', { route: 'mt-ok', provider: 'mock', model: 'mt-ok-1', status: '200', error_class: 'none' }), 2);
    assert.ok(!again.some((s) => s.name === 'llmgw_requests_total' && s.labels.status === '200' && s.labels.route === ''),
      'scrapes are not counted as requests');
  });
});
