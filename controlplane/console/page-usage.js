// Usage: cost and requests over time, grouped, from GET /v1/admin/usage,
// as a chart and as a table, money exact.
import * as api from './api.js';
import { el, field, form, table, section, clear, notice } from './dom.js';
import { formatMoney, groupThousands, toBigInt } from './money.js';
import { barChart } from './chart.js';

const DIMS = ['team', 'project', 'route', 'provider', 'model', 'key', 'agent', 'purpose'];
const n = (v) => groupThousands((toBigInt(v) ?? 0n).toString());

function dayText(d) {
  return d.toISOString().slice(0, 10);
}

function groupLabel(g, dims) {
  return dims.map((d) => (g[d] === null || g[d] === undefined ? `(no ${d})` : g[d])).join(' · ') || 'all';
}

function results(out, json, dims, metric) {
  clear(out);
  const groups = json.groups || [];
  if (!groups.length) {
    out.append(notice('No ledger rows in this range.'));
    return;
  }
  const currencies = [...new Set(groups.map((g) => g.currency))];
  for (const cur of currencies) {
    const mine = groups.filter((g) => g.currency === cur);
    const bars = mine.map((g) => {
      const value = metric === 'cost' ? g.cost_picodollars : g.requests;
      return {
        label: groupLabel(g, dims), value, series: dims.includes('day') ? groupLabel(g, dims.filter((d) => d !== 'day')) : '',
        text: metric === 'cost' ? formatMoney(value, cur) : `${n(value)} requests`,
      };
    });
    const seriesNames = [...new Set(bars.map((b) => b.series))];
    const title = `${metric === 'cost' ? `Cost (${cur})` : `Requests (${cur} rows)`} by ${dims.join(', ') || 'nothing'}`;
    const legend = seriesNames.length > 1
      ? el('ul.legend', {}, seriesNames.map((name, i) => el('li', {}, el(`span.swatch.s${i % 8}`), name)))
      : null;
    out.append(section(title, el('div.chart-wrap', {}, barChart(title, bars, { seriesNames })), legend));
  }
  const cols = [
    ...dims.map((d) => [d, (g) => (g[d] ?? '—')]),
    ['Currency', (g) => g.currency],
    ['Requests', (g) => n(g.requests)],
    ['Attempts', (g) => n(g.attempts)],
    ['Input tokens', (g) => n(g.input_tokens)],
    ['Output tokens', (g) => n(g.output_tokens)],
    ['Cost', (g) => el('span.money', { text: formatMoney(g.cost_picodollars, g.currency) })],
    ['Unpriced attempts', (g) => n(g.unpriced_attempts)],
    ['Cache hits (saved)', (g) => `${n(g.cache_hits)} (${formatMoney(g.saved_picodollars ?? 0n, g.currency)})`],
  ];
  out.append(section('Groups', table('Usage groups', cols, groups, { rowAttrs: (g) => ({ dataset: { group: groupLabel(g, dims) } }) })));
  out.append(section('Totals', table('Totals per currency', [
    ['Currency', (t) => t.currency],
    ['Attempts', (t) => n(t.attempts)],
    ['Input tokens', (t) => n(t.input_tokens)],
    ['Output tokens', (t) => n(t.output_tokens)],
    ['Cost', (t) => el('span.money', { text: formatMoney(t.cost_picodollars, t.currency) })],
    ['Unpriced attempts', (t) => n(t.unpriced_attempts)],
  ], json.totals || [])));
}

export async function render(root, ctx) {
  const now = new Date();
  const from = new Date(now.getTime() - 29 * 86400000);
  const to = new Date(now.getTime() + 86400000);
  const out = el('div.usage-results', { 'aria-live': 'polite' });
  const q = ctx.query;
  const f = form('Usage range and grouping', [
    el('div.inline-fields', {},
      field('From (UTC day)', 'from', { kind: 'date', value: q.get('from') || dayText(from) }),
      field('To (UTC day, exclusive)', 'to', { kind: 'date', value: q.get('to') || dayText(to) }),
      field('Group by', 'group', { kind: 'select', value: q.get('group') || 'route', options: [['', 'nothing'], ...DIMS.map((d) => [d])] }),
      field('Over time (by day)', 'by_day', { kind: 'checkbox', value: q.get('by_day') !== '0' }),
      field('Chart', 'metric', { kind: 'select', value: q.get('metric') || 'cost', options: [['cost', 'cost'], ['requests', 'requests']] })),
  ], {
    submit: 'Show',
    write: false,
    onSubmit: async (fm) => {
      const dims = [];
      if (fm.elements.group.value) dims.push(fm.elements.group.value);
      if (fm.elements.by_day.checked) dims.push('day');
      const r = await api.get('/v1/admin/usage', {
        from: fm.elements.from.value ? `${fm.elements.from.value}T00:00:00Z` : '',
        to: fm.elements.to.value ? `${fm.elements.to.value}T00:00:00Z` : '',
        group_by: dims.join(','),
      });
      if (!ctx.current()) return;
      results(out, r.json, dims, fm.elements.metric.value);
      out.dataset.loaded = String(Date.now());
    },
  });
  root.append(section('Range', f), out);
  f.requestSubmit();
}
