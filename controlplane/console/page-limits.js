// Limits: every budget and rate limit, with what its current window has
// spent against the amount as a bar, the period, and what a data plane does
// offline. The spend is the control plane's (GET /v1/admin/limit-windows:
// the window the data planes' leases are charged to).
import * as api from './api.js';
import { el, field, form, table, section, button, badge, act, notice } from './dom.js';
import { deleteItem, editItem, patchItem } from './items.js';
import { formatMoney, parseMoney, fraction, groupThousands, toBigInt } from './money.js';

function amountText(metric, v) {
  if (v === null || v === undefined) return '—';
  if (metric === 'cost') return formatMoney(v, 'USD');
  return `${groupThousands(toBigInt(v).toString())} ${metric}`;
}

/** The spend of each limit's current window: {limitId: BigInt}. */
async function spends() {
  const out = new Map();
  for (const w of await api.list('/v1/admin/limit-windows')) out.set(w.id, toBigInt(w.spent) ?? 0n);
  return out;
}

function bar(spent, amount, label) {
  const f = fraction(spent, amount);
  const fill = el('span.bar-fill');
  fill.style.width = `${(f * 100).toFixed(2)}%`;
  if (f >= 1) fill.classList.add('over');
  else if (f >= 0.8) fill.classList.add('near');
  return el('span.bar', { role: 'meter', 'aria-label': label, 'aria-valuemin': '0', 'aria-valuemax': '100', 'aria-valuenow': (f * 100).toFixed(1) }, fill);
}

function parseAmount(metric, text) {
  if (metric === 'cost') return parseMoney(text);
  const s = String(text).trim().replace(/,/g, '');
  if (!/^[0-9]+$/.test(s)) throw new RangeError('a whole number');
  return BigInt(s);
}

const OPT = {
  reservation: [['estimate', 'estimate'], ['worst_case', 'worst case (zero overshoot)']],
  offline: [['fail_open', 'fail open (serve while no allowance can be had)'], ['fail_closed', 'fail closed (refuse)']],
  unpriced: [['refuse', 'refuse unpriced targets'], ['allow', 'allow unpriced targets']],
};

function amountError(e) {
  const err = new Error(`amount: ${e.message}`);
  err.param = 'amount';
  err.status = 400;
  err.display = err.message;
  return err;
}

function editor(root, ctx, id) {
  return editItem(root, ctx, {
    path: `/v1/admin/limits/${api.enc(id)}`, back: '#/limits', label: `Edit limit ${id}`, submit: 'Save limit',
    title: (l) => `Limit ${id}: ${l.metric} per ${l.period} of ${l.scope_kind} ${l.scope}`,
    fields: (l) => [
      field(l.metric === 'cost' ? 'Amount (USD)' : `Amount (${l.metric})`, 'amount', {
        value: l.metric === 'cost' ? formatMoney(l.amount, 'USD').replace(/^\$/, '').replace(/,/g, '') : String(l.amount),
        required: true,
      }),
      field('Reservation', 'reservation', { kind: 'select', options: OPT.reservation, value: l.reservation }),
      field('Offline', 'offline', { kind: 'select', options: OPT.offline, value: l.offline }),
      field('Unpriced targets', 'unpriced', { kind: 'select', options: OPT.unpriced, value: l.unpriced }),
      field('Description', 'description', { value: l.description }),
      field('Enabled', 'enabled', { kind: 'checkbox', value: l.enabled }),
    ],
    body: (fm, l) => {
      let amount;
      try {
        amount = parseAmount(l.metric, fm.elements.amount.value);
      } catch (e) {
        throw amountError(e);
      }
      return {
        amount, reservation: fm.elements.reservation.value, offline: fm.elements.offline.value,
        unpriced: fm.elements.unpriced.value, description: fm.elements.description.value, enabled: fm.elements.enabled.checked,
      };
    },
  });
}

export async function render(root, ctx) {
  if (ctx.rest[0]) {
    await editor(root, ctx, ctx.rest[0]);
    return;
  }
  const limits = await api.list('/v1/admin/limits');
  let spent = new Map();
  let spendNote = 'Spent: the current UTC window, as charged from the ledger (allowance the data planes hold but have not used yet is not in it).';
  try {
    spent = await spends();
  } catch (e) {
    spendNote = `Spend unavailable: ${e.display || e.message}`;
  }
  root.append(section('Limits', el('p.hint', { text: spendNote }), table('Budgets and rate limits', [
    ['Limit', (l) => [el('strong', { text: l.id }), l.description ? el('div.hint', { text: l.description }) : null]],
    ['Applies to', (l) => `${l.scope_kind} ${l.scope}`],
    ['Metric / period', (l) => `${l.metric} per ${l.period} (UTC)`],
    ['Spent / amount', (l) => {
      const s = spent.get(l.id);
      return el('div.spend', {},
        bar(s ?? 0n, l.amount, `${l.id}: spent against amount`),
        el('span', { text: `${s === undefined ? '?' : amountText(l.metric, s)} of ${amountText(l.metric, l.amount)}` }));
    }],
    ['Offline', (l) => (l.offline === 'fail_open' ? 'fail open: served' : 'fail closed: refused')],
    ['Reservation', (l) => l.reservation],
    ['Enabled', (l) => badge(l.enabled ? 'enabled' : 'disabled', l.enabled ? 'ok' : 'down')],
    ['Actions', (l) => el('div.row-actions', {},
      button('Edit', () => ctx.navigate(`#/limits/${api.enc(l.id)}`), { write: true, label: `Edit limit ${l.id}` }),
      button(l.enabled ? 'Disable' : 'Enable', () => patchItem(`/v1/admin/limits/${api.enc(l.id)}`, { enabled: !l.enabled }, ctx), { write: true, label: `${l.enabled ? 'Disable' : 'Enable'} limit ${l.id}` }),
      deleteItem(`limit ${l.id}`, `/v1/admin/limits/${api.enc(l.id)}`, ctx))],
  ], limits, { empty: 'No limit yet.', rowAttrs: (l) => ({ dataset: { id: l.id } }) })));
  root.append(section('New limit', form('New limit', [
    field('Id', 'id', { hint: 'empty: lim_ and 16 hex digits' }),
    field('Applies to a', 'scope_kind', { kind: 'select', options: [['key'], ['team'], ['project']] }),
    field('Key id, team or project name', 'scope', { required: true }),
    field('Metric', 'metric', { kind: 'select', options: [['cost', 'cost (USD)'], ['requests'], ['tokens']] }),
    field('Period', 'period', { kind: 'select', options: [['day'], ['month'], ['minute']] }),
    field('Amount', 'amount', { required: true, hint: 'cost: USD, exact to 12 decimals (e.g. 25.50); otherwise a count' }),
    field('Reservation', 'reservation', { kind: 'select', options: OPT.reservation }),
    field('Offline', 'offline', { kind: 'select', options: OPT.offline }),
    field('Unpriced targets', 'unpriced', { kind: 'select', options: OPT.unpriced }),
    field('Description', 'description'),
  ], {
    submit: 'Create limit',
    onSubmit: async (fm) => {
      const v = (n) => fm.elements[n].value.trim();
      let amount;
      try {
        amount = parseAmount(v('metric'), v('amount'));
      } catch (e) {
        throw amountError(e);
      }
      const b = {
        scope_kind: v('scope_kind'), scope: v('scope'), metric: v('metric'), period: v('period'), amount,
        reservation: v('reservation'), offline: v('offline'), unpriced: v('unpriced'), description: v('description'),
      };
      if (v('id')) b.id = v('id');
      await api.call('POST', '/v1/admin/limits', { body: b });
      ctx.refresh();
    },
  })));
  if (!limits.length) root.append(notice('No budget or rate limit: every key may spend without bound.'));
}
