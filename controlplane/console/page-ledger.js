// Ledger: recent attempts (newest first), filtered; one request's
// attempts side by side (its failover story).
import * as api from './api.js';
import { el, field, form, table, section, clear, badge, fmtTime, notice } from './dom.js';
import { formatMoney, groupThousands } from './money.js';

const FILTERS = [
  ['request_id', 'Request id'], ['key_id', 'Key id'], ['route', 'Route'], ['provider', 'Provider'], ['model', 'Model'], ['status', 'HTTP status'],
];

function cost(r) {
  return el('span.money', { text: formatMoney(r.cost_picodollars, r.currency) });
}

function attemptCard(r) {
  const ok = r.status >= 200 && r.status < 300;
  const dl = el('dl.kv', {}, [
    ['Target', `${r.provider}/${r.model}`],
    ['Status', [badge(String(r.status), ok ? 'ok' : 'down'), r.failure_class ? ` ${r.failure_class}` : '']],
    ['At', fmtTime(r.at)],
    ['Route / selector', `${r.route ?? '—'} / ${r.selector ?? '—'}`],
    ['API', `${r.api ?? '—'}${r.stream ? ' (stream)' : ''}`],
    ['Tokens in / out', `${groupThousands(String(r.input_tokens))} / ${groupThousands(String(r.output_tokens))}${r.usage_estimated ? ' (estimated)' : ''}`],
    ['Cost', cost(r)],
    ['Cache hit', r.cache_hit ? `yes (saved ${formatMoney(r.saved_picodollars, r.currency)})` : 'no'],
    ['Latency / first byte', `${r.latency_ms ?? '—'} ms / ${r.ttfb_ms ?? '—'} ms`],
    ['Replica', r.replica ?? '—'],
    ['Key / team / project', `${r.key_id ?? '—'} / ${r.team ?? '—'} / ${r.project ?? '—'}`],
    ['Attempt id', el('code', { text: r.attempt_id })],
  ].map(([k, v]) => [el('dt', { text: k }), el('dd', {}, v)]));
  return el('article.attempt', { class: ok ? 'ok' : 'failed', dataset: { attempt: String(r.attempt) }, 'aria-label': `Attempt ${r.attempt}` },
    el('h3', { text: `Attempt ${r.attempt}` }), dl);
}

async function requestView(root, ctx, rid) {
  const r = await api.get('/v1/admin/ledger', { request_id: rid });
  const rows = r.json.data || [];
  root.append(el('p', {}, el('a', { href: '#/ledger', text: '← All recent attempts' })));
  if (!rows.length) {
    root.append(notice(`No ledger row for request ${rid} yet (a data plane's rows arrive within about a second).`));
    return;
  }
  const last = rows[rows.length - 1];
  root.append(section(`Request ${rid}: ${rows.length} attempt${rows.length > 1 ? 's' : ''}, answered ${last.status} by ${last.provider}/${last.model}`,
    el('div.attempts', {}, rows.map(attemptCard))));
}

export async function render(root, ctx) {
  if (ctx.rest[0]) {
    await requestView(root, ctx, ctx.rest[0]);
    return;
  }
  const q = ctx.query;
  const out = el('div.ledger-results', { 'aria-live': 'polite' });
  const f = form('Ledger filters', [
    el('div.inline-fields', {}, FILTERS.map(([k, label]) => field(label, k, { value: q.get(k) || '', kind: k === 'status' ? 'number' : 'text' })),
      field('Rows', 'limit', { kind: 'number', value: q.get('limit') || '100', attrs: { min: 1, max: 1000 } })),
  ], {
    submit: 'Filter',
    write: false,
    onSubmit: async (fm) => {
      const query = {};
      for (const [k] of FILTERS) query[k] = fm.elements[k].value.trim();
      query.limit = fm.elements.limit.value.trim();
      const r = await api.get('/v1/admin/ledger', query);
      if (!ctx.current()) return;
      clear(out);
      out.append(table('Recent attempts, newest first', [
        ['At', (x) => fmtTime(x.at)],
        ['Request', (x) => el('a', { href: `#/ledger/${api.enc(x.request_id)}`, text: x.request_id, 'aria-label': `Request ${x.request_id}: its attempts` })],
        ['#', (x) => String(x.attempt)],
        ['Route', (x) => x.route ?? '—'],
        ['Target', (x) => `${x.provider}/${x.model}`],
        ['Status', (x) => [badge(String(x.status), x.status < 300 ? 'ok' : 'down'), x.failure_class ? ` ${x.failure_class}` : '']],
        ['Key', (x) => x.key_id ?? '—'],
        ['Tokens in/out', (x) => `${x.input_tokens} / ${x.output_tokens}`],
        ['Cost', cost],
        ['Latency', (x) => `${x.latency_ms} ms`],
      ], r.json.data || [], {
        empty: 'No attempt matches.',
        rowAttrs: (x) => ({ dataset: { request: x.request_id, attempt: String(x.attempt) } }),
      }));
      out.dataset.loaded = String(Date.now());
    },
  });
  root.append(section('Filters', f), out);
  f.requestSubmit();
}
