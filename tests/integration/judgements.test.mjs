// Judgements in the control plane (docs/ledger.md, "Judgements";
// docs/openapi.yaml): PostgreSQL + llmgw-controlplane, fed by
// tests/cpfake/llmgw-report-client, which sends the Report messages a data
// plane would (a Judgement alone, and after a LedgerBatch's rows) and
// waits for their acks.
//
// Judgements are acknowledged in the rows' seq sequence and stored once
// however often they are sent; one the table would refuse is acknowledged,
// logged by request id and not stored. The kept text is sealed with the
// master key (it opens with the key under "judgement/<id>#prompt", and its
// bytes are not in the table); without a master key it is not stored and
// the control plane says so once. GET /v1/admin/judgements filters (route,
// model, provider, request_id, from/to in RFC 3339 or Unix ms, limit,
// offset) newest first; include_text=true (an admin token only) adds the
// text of the rows that kept it; the summary groups by route, model,
// provider and day with count, mean_score, pass_rate and mean_normalized.
// Bad parameters are 400s naming them. A canary in the judged text is in
// no line either control plane prints and in no column of the table.

import { createDecipheriv, randomBytes } from 'node:crypto';
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import * as h from './harness.mjs';
import { masterKey } from './cpconfig.mjs';
import { metricValue, promtoolCheck, scrapeMetrics } from './exposition.mjs';

const T = { timeout: 90_000 };
const KEY = masterKey();
const CANARY = `CNRY${randomBytes(8).toString('hex')}`;
const PROMPT = `Summarize this for me ${CANARY} — naïve café ✓`;
const ANSWER = `Here is the summary ${CANARY}`;

// Times: the first tests at T_OLD; the filter set from T0 over three
// days; the paging set ten days later.
const T_OLD = Date.UTC(2025, 5, 1, 12);
const T0 = Date.UTC(2026, 10, 30, 10);
const HOUR = 3_600_000;
const DAY = 24 * HOUR;
const iso = (ms) => new Date(ms).toISOString();

let pg;
let cp; // with a master key
let cp2; // without one, on its own database
let readToken;

const judgement = (o) => ({
  attempt_id: `${o.request_id}.1`,
  judge_request_id: `${o.request_id}-judge`,
  route: 'chat',
  provider: 'mock',
  model: 'm1',
  key_id: 'key-1',
  team: 'blue',
  project: 'web',
  judge_route: 'judge',
  score: 4,
  scale_min: 1,
  scale_max: 5,
  pass: (o.score ?? 4) >= 4,
  label: (o.score ?? 4) >= 4 ? 'good' : 'poor',
  at_ms: T_OLD,
  snapshot_version: 7,
  ...o,
});

const row = (seq, id) => ({
  seq,
  request_id: id,
  attempt_id: `${id}.1`,
  attempt: 1,
  provider: 'mock',
  model: 'm1',
  route: 'chat',
  api: 'openai.chat',
  at_ms: T_OLD,
  latency_ms: 12,
  status: 200,
  input_tokens: 3,
  output_tokens: 5,
  snapshot_version: 7,
});

const send = (c, messages, replicaId = 'dp-judge') =>
  h.runReportClient({ target: `127.0.0.1:${c.listening.grpc_port}`, messages, replicaId });

const list = async (q, c = cp, headers = {}) => {
  const r = await c.admin('GET', `/v1/admin/judgements${q}`, undefined, headers);
  assert.equal(r.status, 200, r.text);
  return r.json.judgements;
};
const ids = (js) => js.map((j) => j.request_id);
const summary = async (q) => {
  const r = await cp.admin('GET', `/v1/admin/judgements/summary${q}`);
  assert.equal(r.status, 200, r.text);
  return r.json.groups;
};

/** Opens a blob sealed as cp_secret_seal does, for ref. */
function open(key, ref, blob) {
  assert.equal(blob[0], 1, 'blob version');
  const d = createDecipheriv('aes-256-gcm', key.buf, blob.subarray(1, 13));
  d.setAAD(Buffer.concat([Buffer.from([1]), Buffer.from(ref, 'utf8')]));
  d.setAuthTag(blob.subarray(blob.length - 16));
  return Buffer.concat([d.update(blob.subarray(13, blob.length - 16)), d.final()]).toString('utf8');
}

const sqlBytes = (q, db) => Buffer.from(pg.sql(q, db).replace(/^\\x/, ''), 'hex');
const lines = (c) => [...c.proc.stdoutLines, ...c.proc.stderrLines];
const logJson = (c) => lines(c).map(h.tryParseJson).filter((j) => j && typeof j === 'object');

before(async () => {
  h.requireBinaries([h.CONTROLPLANE_BIN, h.REPORT_CLIENT_BIN]);
  pg = await h.startPostgres();
  cp = await h.startControlPlane({ pg, env: { LLMGW_MASTER_KEY: KEY.hex } });
  cp2 = await h.startControlPlane({ conninfo: pg.createDatabase('nokey') });
  const t = await cp.admin('POST', '/v1/admin/admin-tokens', { name: 'reader', scope: 'read' });
  assert.equal(t.status, 201, t.text);
  readToken = t.json.token;
});

after(async () => {
  await h.stopAll();
});

describe('judgements on the Report stream', () => {
  test('alone and after a batch\'s rows: acked in the rows\' sequence, the kept text sealed', T, async () => {
    const r = await send(cp, [
      { ledger_row: row(1, 'req-r1') },
      { judgement: judgement({ seq: 2, request_id: 'req-a', prompt_text: PROMPT, answer_text: ANSWER }) },
      {
        ledger_batch: {
          rows: [row(3, 'req-r2'), row(4, 'req-r3')],
          judgements: [
            judgement({ seq: 5, request_id: 'req-b', score: 2 }),
            judgement({ seq: 6, request_id: 'req-c', prompt_text: PROMPT }),
          ],
        },
      },
    ]);
    assert.equal(r.code, 0, r.proc.describe());
    assert.equal(r.acked, 6);
    assert.ok(r.replies.every((x) => x.ledger_batch_max > 0));
    assert.equal(pg.sql("SELECT count(*) FROM ledger WHERE request_id IN ('req-r1', 'req-r2', 'req-r3')"), '3');
    assert.equal(pg.sql("SELECT string_agg(request_id || ':' || score || ':' || pass || ':' || replica, ',' "
      + "ORDER BY request_id) FROM judgements WHERE request_id LIKE 'req-%'"), 'req-a:4:true:dp-judge,req-b:2:false:dp-judge,req-c:4:true:dp-judge');
    // What was kept is sealed under the master key, bound to its row and part.
    assert.equal(pg.sql("SELECT string_agg(request_id || ':' || (prompt_enc IS NOT NULL) || ':' || (answer_enc IS NOT NULL) "
      + "|| ':' || coalesce(master_key_id, '-'), ',' ORDER BY request_id) FROM judgements WHERE request_id LIKE 'req-%'"),
    `req-a:true:true:${KEY.id},req-b:false:false:-,req-c:true:false:${KEY.id}`);
    const p = sqlBytes("SELECT prompt_enc FROM judgements WHERE request_id = 'req-a'");
    const a = sqlBytes("SELECT answer_enc FROM judgements WHERE request_id = 'req-a'");
    assert.ok(!p.includes(CANARY) && !a.includes(CANARY), 'the text is not in the table in plaintext');
    assert.equal(open(KEY, 'judgement/req-a#prompt', p), PROMPT);
    assert.equal(open(KEY, 'judgement/req-a#answer', a), ANSWER);
    assert.throws(() => open(KEY, 'judgement/req-a#answer', p), 'a blob opens only for its own part');
  });

  test('a judgement sent again is stored once (the first stays)', T, async () => {
    const r = await send(cp, [
      { judgement: judgement({ seq: 1, request_id: 'req-a', score: 1, prompt_text: 'other' }) },
      { ledger_batch: { judgements: [judgement({ seq: 2, request_id: 'req-b', score: 5 })] } },
    ]);
    assert.equal(r.code, 0, r.proc.describe());
    assert.equal(r.acked, 2);
    assert.equal(pg.sql("SELECT count(*) FROM judgements WHERE request_id IN ('req-a', 'req-b')"), '2');
    assert.equal(pg.sql("SELECT string_agg(score::text, ',' ORDER BY request_id) FROM judgements WHERE request_id IN ('req-a', 'req-b')"), '4,2');
    const p = sqlBytes("SELECT prompt_enc FROM judgements WHERE request_id = 'req-a'");
    assert.equal(open(KEY, 'judgement/req-a#prompt', p), PROMPT);
  });

  test('one the table would refuse is acknowledged, logged by request id, not stored', T, async () => {
    const r = await send(cp, [
      { judgement: judgement({ seq: 1, request_id: 'req-bad', score: 9, prompt_text: PROMPT }) },
      { judgement: judgement({ seq: 2, request_id: 'req-after-bad' }) },
    ]);
    assert.equal(r.code, 0, r.proc.describe());
    assert.equal(r.acked, 2);
    assert.equal(pg.sql("SELECT count(*) FROM judgements WHERE request_id = 'req-bad'"), '0');
    assert.equal(pg.sql("SELECT count(*) FROM judgements WHERE request_id = 'req-after-bad'"), '1');
    const logged = logJson(cp).filter((j) => j.request_id === 'req-bad');
    assert.equal(logged.length, 1, JSON.stringify(logged));
    assert.match(logged[0].msg, /judgement refused/);
    assert.match(logged[0].error, /score/);
  });
});

describe('GET /v1/admin/judgements', () => {
  // Six judgements over three days on two routes, two models, two providers.
  const F = [
    { request_id: 'f1', route: 'fr-chat', model: 'fm1', provider: 'fp1', at_ms: T0, score: 5 },
    { request_id: 'f2', route: 'fr-chat', model: 'fm2', provider: 'fp1', at_ms: T0 + HOUR, score: 3 },
    { request_id: 'f3', route: 'fr-code', model: 'fm1', provider: 'fp2', at_ms: T0 + DAY, score: 2 },
    { request_id: 'f4', route: 'fr-code', model: 'fm2', provider: 'fp2', at_ms: T0 + DAY + HOUR, score: 4 },
    { request_id: 'f5', route: 'fr-chat', model: 'fm1', provider: 'fp2', at_ms: T0 + 2 * DAY, score: 1 },
    { request_id: 'f6', route: 'fr-chat', model: 'fm1', provider: 'fp1', at_ms: T0 + 2 * DAY + HOUR, score: 5 },
  ];
  const MANY = 105;

  before(async () => {
    // Sent out of time order, in one batch; then 105 more on a route of
    // their own, ten days later.
    const order = [3, 0, 5, 1, 4, 2];
    const r = await send(cp, [
      { ledger_batch: { judgements: order.map((i, k) => judgement({ ...F[i], seq: k + 1 })) } },
      {
        ledger_batch: {
          judgements: Array.from({ length: MANY }, (_, i) => judgement({
            seq: 7 + i, request_id: `m${String(i).padStart(3, '0')}`, route: 'fr-many', at_ms: T0 + 10 * DAY + i * 1000,
          })),
        },
      },
    ]);
    assert.equal(r.code, 0, r.proc.describe());
    assert.equal(r.acked, 6 + MANY);
  });

  test('filters by route, model, provider, request id and time; newest first', T, async () => {
    assert.deepEqual(ids(await list('?route=fr-chat')), ['f6', 'f5', 'f2', 'f1']);
    assert.deepEqual(ids(await list('?model=fm2')), ['f4', 'f2']);
    assert.deepEqual(ids(await list('?provider=fp2')), ['f5', 'f4', 'f3']);
    assert.deepEqual(ids(await list('?route=fr-chat&model=fm1&provider=fp1')), ['f6', 'f1']);
    // from is inclusive, to exclusive; RFC 3339 or Unix ms, either way.
    assert.deepEqual(ids(await list(`?route=fr-chat&from=${iso(T0 + HOUR)}&to=${T0 + 2 * DAY + HOUR}`)), ['f5', 'f2']);
    assert.deepEqual(ids(await list(`?from=${T0 + DAY}&to=${encodeURIComponent('2026-12-01T12:30:00+01:00')}`)), ['f4', 'f3']);
    const [f3] = await list('?request_id=f3');
    assert.deepEqual(f3, {
      request_id: 'f3',
      attempt_id: 'f3.1',
      judge_request_id: 'f3-judge',
      route: 'fr-code',
      provider: 'fp2',
      model: 'fm1',
      key_id: 'key-1',
      team: 'blue',
      project: 'web',
      judge_route: 'judge',
      score: 2,
      scale_min: 1,
      scale_max: 5,
      pass: false,
      label: 'poor',
      at: '2026-12-01T10:00:00.000Z',
      snapshot_version: 7,
    });
    assert.deepEqual(await list('?request_id=nope'), []);
  });

  test('limit (default 100, at most 1000) and offset', T, async () => {
    assert.deepEqual(ids(await list('?route=fr-chat&limit=2')), ['f6', 'f5']);
    assert.deepEqual(ids(await list('?route=fr-chat&limit=2&offset=2')), ['f2', 'f1']);
    const page = await list('?route=fr-many');
    assert.equal(page.length, 100);
    assert.equal(page[0].request_id, `m${MANY - 1}`);
    assert.equal((await list('?route=fr-many&limit=1000')).length, MANY);
  });

  test('include_text: the text of the rows that kept it, for an admin token only', T, async () => {
    const [a] = await list('?request_id=req-a&include_text=true');
    assert.equal(a.prompt_text, PROMPT);
    assert.equal(a.answer_text, ANSWER);
    const [c] = await list('?request_id=req-c&include_text=true');
    assert.equal(c.prompt_text, PROMPT);
    assert.ok(!('answer_text' in c));
    const [b] = await list('?request_id=req-b&include_text=true');
    assert.ok(!('prompt_text' in b) && !('answer_text' in b));
    const [plain] = await list('?request_id=req-a');
    assert.ok(!('prompt_text' in plain) && !('answer_text' in plain));
    assert.ok(!JSON.stringify(await list('?route=chat')).includes(CANARY));
    // A read token reads the scores, not the text.
    const reader = { authorization: `Bearer ${readToken}` };
    assert.deepEqual(ids(await list('?request_id=req-a', cp, reader)), ['req-a']);
    h.assertError(await cp.admin('GET', '/v1/admin/judgements?request_id=req-a&include_text=true', undefined, reader),
      403, 'forbidden', 'include_text');
    assert.equal((await cp.admin('GET', '/v1/admin/judgements/summary', undefined, reader)).status, 200);
    h.assertError(await cp.admin('GET', '/v1/admin/judgements?include_text=true&limit=101'), 400, 'invalid_value', 'limit');
  });

  test('bad parameters are 400s naming them', T, async () => {
    const bad = [
      ['?route=', 'route'],
      ['?model=a%01b', 'model'],
      [`?provider=${'p'.repeat(257)}`, 'provider'],
      ['?request_id=%zz', 'request_id'],
      ['?from=yesterday', 'from'],
      ['?to=2026-02-30T00:00:00Z', 'to'],
      ['?from=2026-12-01', 'from'],
      ['?limit=0', 'limit'],
      ['?limit=1001', 'limit'],
      ['?limit=ten', 'limit'],
      ['?offset=-1', 'offset'],
      ['?include_text=yes', 'include_text'],
      ['?route=a&route=b', 'route'],
      ['?group_by=route', 'group_by'],
    ];
    for (const [q, param] of bad) {
      const r = await cp.admin('GET', `/v1/admin/judgements${q}`);
      assert.equal(r.status, 400, `${q}: ${r.text}`);
      assert.equal(r.json.error.param, param, `${q}: ${r.text}`);
    }
    h.assertError(await cp.admin('GET', '/v1/admin/judgements?modle=fm1'), 400, 'unknown_parameter', 'modle');
    const sbad = [
      ['?group_by=team', 'group_by'],
      ['?group_by=route,route', 'group_by'],
      ['?limit=5', 'limit'],
      ['?include_text=true', 'include_text'],
      ['?from=12:00', 'from'],
    ];
    for (const [q, param] of sbad) {
      const r = await cp.admin('GET', `/v1/admin/judgements/summary${q}`);
      assert.equal(r.status, 400, `${q}: ${r.text}`);
      assert.equal(r.json.error.param, param, `${q}: ${r.text}`);
    }
    h.assertError(await cp.admin('POST', '/v1/admin/judgements', {}), 405);
    assert.equal((await h.request(cp.port, { method: 'GET', path: '/v1/admin/judgements' })).status, 401);
  });

  test('summary: count, mean score and pass rate per route, model, provider and day', T, async () => {
    const win = `from=${iso(T0)}&to=${T0 + 3 * DAY}`;
    sameGroups(await summary(`?group_by=route&${win}`), [
      { route: 'fr-chat', count: 4, mean_score: 3.5, pass_rate: 0.5, mean_normalized: 0.625 },
      { route: 'fr-code', count: 2, mean_score: 3, pass_rate: 0.5, mean_normalized: 0.5 },
    ]);
    sameGroups(await summary(`?group_by=route%2Cmodel&${win}`), [
      { route: 'fr-chat', model: 'fm1', count: 3, mean_score: 11 / 3, pass_rate: 2 / 3, mean_normalized: 2 / 3 },
      { route: 'fr-chat', model: 'fm2', count: 1, mean_score: 3, pass_rate: 0, mean_normalized: 0.5 },
      { route: 'fr-code', model: 'fm1', count: 1, mean_score: 2, pass_rate: 0, mean_normalized: 0.25 },
      { route: 'fr-code', model: 'fm2', count: 1, mean_score: 4, pass_rate: 1, mean_normalized: 0.75 },
    ]);
    sameGroups(await summary('?group_by=day&route=fr-chat'), [
      { day: '2026-11-30', count: 2, mean_score: 4, pass_rate: 0.5, mean_normalized: 0.75 },
      { day: '2026-12-02', count: 2, mean_score: 3, pass_rate: 0.5, mean_normalized: 0.5 },
    ]);
    sameGroups(await summary('?group_by=provider&route=fr-chat'), [
      { provider: 'fp1', count: 3, mean_score: 13 / 3, pass_rate: 2 / 3, mean_normalized: 5 / 6 },
      { provider: 'fp2', count: 1, mean_score: 1, pass_rate: 0, mean_normalized: 0 },
    ]);
    sameGroups(await summary('?route=fr-code'), [{ count: 2, mean_score: 3, pass_rate: 0.5, mean_normalized: 0.5 }]);
    sameGroups(await summary('?route=nope'), []);
    sameGroups(await summary('?group_by=day,provider,model,route&request_id=f4'), [
      { route: 'fr-code', model: 'fm2', provider: 'fp2', day: '2026-12-01', count: 1, mean_score: 4, pass_rate: 1, mean_normalized: 0.75 },
    ]);
  });
});

describe('without a master key', () => {
  test('the kept text is not stored, the scores are, and the control plane says so once', T, async () => {
    const r = await send(cp2, [
      { judgement: judgement({ seq: 1, request_id: 'nk-1', prompt_text: PROMPT, answer_text: ANSWER }) },
      { ledger_batch: { judgements: [judgement({ seq: 2, request_id: 'nk-2', answer_text: ANSWER })] } },
    ]);
    assert.equal(r.code, 0, r.proc.describe());
    assert.equal(r.acked, 2);
    assert.equal(pg.sql('SELECT count(*) FROM judgements WHERE prompt_enc IS NULL AND answer_enc IS NULL AND master_key_id IS NULL', 'nokey'), '2');
    const warned = logJson(cp2).filter((j) => /judgements: .*LLMGW_MASTER_KEY/.test(j.msg ?? ''));
    assert.equal(warned.length, 1, JSON.stringify(warned));
    const { samples } = await scrapeMetrics(cp2.port, { authorization: `Bearer ${cp2.token}` });
    assert.equal(metricValue(samples, 'llmgw_cp_judgement_texts_dropped_total'), 2);
    assert.equal(metricValue(samples, 'llmgw_cp_judgements_total', { result: 'inserted' }), 2);
    h.assertError(await cp2.admin('GET', '/v1/admin/judgements?include_text=true'), 503, 'master_key_not_configured', 'include_text');
    assert.deepEqual(ids((await cp2.admin('GET', '/v1/admin/judgements')).json.judgements), ['nk-2', 'nk-1']);
  });
});

describe('metrics and the canary', () => {
  test('counters by result and message body; promtool accepts the exposition', T, async () => {
    const { text, samples } = await scrapeMetrics(cp.port, { authorization: `Bearer ${cp.token}` });
    promtoolCheck(text);
    assert.equal(metricValue(samples, 'llmgw_cp_judgements_total', { result: 'inserted' }), Number(pg.sql('SELECT count(*) FROM judgements')));
    assert.equal(metricValue(samples, 'llmgw_cp_judgements_total', { result: 'duplicate' }), 2);
    assert.equal(metricValue(samples, 'llmgw_cp_judgements_total', { result: 'rejected' }), 1);
    assert.equal(metricValue(samples, 'llmgw_cp_judgement_texts_dropped_total'), 0);
    assert.equal(metricValue(samples, 'llmgw_cp_ledger_messages_total', { body: 'judgement' }), 4);
    assert.equal(metricValue(samples, 'llmgw_cp_ledger_messages_total', { body: 'ledger_batch' }), 4);
    assert.equal(metricValue(samples, 'llmgw_cp_ledger_rows_total', { result: 'inserted' }), 3);
    assert.ok(!text.includes(CANARY));
  });

  test('the canary is in no line either control plane printed and in no column in clear', T, async () => {
    for (const c of [cp, cp2]) {
      const hits = lines(c).filter((l) => l.includes(CANARY) || l.includes('Summarize this'));
      assert.deepEqual(hits, [], `${c.proc.name} printed the judged text`);
    }
    for (const db of ['postgres', 'nokey']) {
      assert.equal(pg.sql(`SELECT count(*) FROM judgements j WHERE j::text LIKE '%${CANARY}%' `
        + `OR position(convert_to('${CANARY}', 'UTF8') IN coalesce(prompt_enc, ''::bytea) || coalesce(answer_enc, ''::bytea)) > 0`, db), '0');
    }
  });
});

describe('master-key rotation', () => {
  test('rotate-master-key rewraps the kept text with the secrets; the old key no longer opens it', T, async () => {
    const KEY2 = masterKey();
    const env = { ...process.env, LLMGW_DATABASE_URL: pg.conninfo, LLMGW_MASTER_KEY: KEY.hex, LLMGW_NEW_MASTER_KEY: KEY2.hex };
    const rot = new h.ManagedProcess('rotate', h.CONTROLPLANE_BIN, ['rotate-master-key'], { env });
    rot.exitExpected = true;
    await rot.waitExit(30_000);
    assert.equal(rot.exitInfo.code, 0, rot.describe());
    const done = [...rot.stdoutLines, ...rot.stderrLines].map(h.tryParseJson).find((j) => j?.msg === 'master key rotated');
    assert.equal(done.judgements_rewrapped, 2, rot.describe());
    assert.equal(pg.sql('SELECT string_agg(DISTINCT master_key_id, \',\') FROM judgements'), KEY2.id);
    assert.equal(open(KEY2, 'judgement/req-a#answer', sqlBytes("SELECT answer_enc FROM judgements WHERE request_id = 'req-a'")), ANSWER);
    // The running control plane still holds the old key: the row says so.
    const [stale] = await list('?request_id=req-a&include_text=true');
    assert.ok(!('prompt_text' in stale));
    assert.match(stale.text_error, /does not open/);
    const cp3 = await h.startControlPlane({ pg, env: { LLMGW_MASTER_KEY: KEY2.hex } });
    const [fresh] = await list('?request_id=req-c&include_text=true', cp3);
    assert.equal(fresh.prompt_text, PROMPT);
    assert.ok(!lines(cp3).some((l) => l.includes(CANARY)) && !lines({ proc: rot }).some((l) => l.includes(CANARY)));
  });
});

/** Groups equal to want: the same members, numbers within 1e-9. */
function sameGroups(got, want) {
  assert.equal(got.length, want.length, JSON.stringify(got));
  got.forEach((g, i) => {
    assert.deepEqual(Object.keys(g).sort(), Object.keys(want[i]).sort(), JSON.stringify(g));
    for (const [k, v] of Object.entries(want[i])) {
      if (typeof v === 'number') assert.ok(Math.abs(g[k] - v) < 1e-9, `${k}: ${g[k]} != ${v} in ${JSON.stringify(g)}`);
      else assert.equal(g[k], v, `${k} in ${JSON.stringify(g)}`);
    }
  });
}
