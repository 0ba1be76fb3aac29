// Routes: entries reordered by buttons or by drag, strategy, weights,
// tiers, high-cost marks, capability, role, aliases; and the router's plan
// for a sample request (GET /v1/admin/plan).
import * as api from './api.js';
import { el, clear, field, form, table, section, button, csv, badge, notice, fmtTime } from './dom.js';
import { deleteItem } from './items.js';

const STRATEGIES = ['ordered', 'price', 'latency', 'auto', 'weighted'];
const CAPABILITIES = ['chat', 'embeddings', 'vision', 'transcription', 'speech', 'image'];
const ROLES = [['', 'none'], ['default'], ['summarize'], ['embedding'], ['vision']];

/** The entries list: state + a DOM list rebuilt from it. */
class EntriesEditor {
  constructor(entries, providers) {
    this.entries = entries.map((e) => ({ weight: 1, tier: 0, high_cost: false, ...e }));
    this.providers = providers;
    this.list = el('ol.entries', { 'aria-label': 'Entries, in the order the router tries them' });
    this.live = el('p.sr-only', { 'aria-live': 'polite' });
    this.dragFrom = null;
    this.root = el('fieldset.entries-box', {},
      el('legend', { text: 'Entries (tried in this order by the ordered strategy)' }),
      el('p.hint', { text: 'Reorder with the Up and Down buttons, or drag an entry by its handle.' }),
      this.list, this.live,
      el('div.actions', {}, button('Add entry', () => {
        this.entries.push({ provider: providers[0]?.name ?? '', model: '', weight: 1, tier: 0, high_cost: false });
        this.render();
        this.list.lastElementChild?.querySelector('select')?.focus();
      }, { write: true })));
    this.render();
  }

  move(from, to, focusSel) {
    if (to < 0 || to >= this.entries.length || from === to) return;
    const [e] = this.entries.splice(from, 1);
    this.entries.splice(to, 0, e);
    this.render();
    this.live.textContent = `${e.provider}/${e.model} moved to position ${to + 1}.`;
    if (focusSel) this.list.children[to]?.querySelector(focusSel)?.focus();
  }

  render() {
    clear(this.list);
    const n = this.entries.length;
    this.entries.forEach((e, i) => {
      const p = `entries[${i}]`;
      const what = `entry ${i + 1}`;
      const provider = field(`Provider (${what})`, `${p}.provider`, {
        kind: 'select', value: e.provider,
        options: [...new Set([...this.providers.map((x) => x.name), e.provider].filter(Boolean))].map((x) => [x]),
      });
      const model = field(`Model (${what})`, `${p}.model`, { value: e.model, required: true });
      const weight = field(`Weight (${what})`, `${p}.weight`, { kind: 'number', value: e.weight, attrs: { min: 0, max: 1000000 } });
      const tier = field(`Tier (${what})`, `${p}.tier`, { kind: 'number', value: e.tier, attrs: { min: 0, max: 9 } });
      const high = field(`High cost (${what})`, `${p}.high_cost`, { kind: 'checkbox', value: e.high_cost });
      const bind = (wrap, key, conv) => {
        const c = wrap.querySelector('input, select');
        c.addEventListener(c.type === 'checkbox' ? 'change' : 'input', () => {
          e[key] = c.type === 'checkbox' ? c.checked : conv(c.value);
        });
      };
      bind(provider, 'provider', String);
      bind(model, 'model', String);
      bind(weight, 'weight', Number);
      bind(tier, 'tier', Number);
      bind(high, 'high_cost', Boolean);
      const handle = el('span.handle', {
        draggable: 'true', text: '⠿', title: 'Drag to reorder', 'aria-hidden': 'true',
      });
      const li = el('li.entry', { dataset: { index: String(i), target: `${e.provider}/${e.model}` } },
        handle, el('span.pos', { text: `${i + 1}.` }),
        provider, model, weight, tier, high,
        el('div.entry-actions', {},
          el('button.write.up', {
            type: 'button', text: 'Up', disabled: i === 0, 'aria-label': `Move ${e.provider}/${e.model} up`,
            on: { click: () => this.move(i, i - 1, i - 1 === 0 ? 'button.down' : 'button.up') },
          }),
          el('button.write.down', {
            type: 'button', text: 'Down', disabled: i === n - 1, 'aria-label': `Move ${e.provider}/${e.model} down`,
            on: { click: () => this.move(i, i + 1, i + 1 === n - 1 ? 'button.up' : 'button.down') },
          }),
          el('button.write.danger', {
            type: 'button', text: 'Remove', disabled: n === 1, 'aria-label': `Remove ${e.provider}/${e.model}`,
            on: { click: () => { this.entries.splice(i, 1); this.render(); } },
          })));
      handle.addEventListener('dragstart', (ev) => {
        this.dragFrom = i;
        ev.dataTransfer.effectAllowed = 'move';
        ev.dataTransfer.setData('text/plain', String(i));
        li.classList.add('dragging');
      });
      handle.addEventListener('dragend', () => li.classList.remove('dragging'));
      li.addEventListener('dragover', (ev) => {
        if (this.dragFrom === null) return;
        ev.preventDefault();
        ev.dataTransfer.dropEffect = 'move';
        li.classList.add('drop-target');
      });
      li.addEventListener('dragleave', () => li.classList.remove('drop-target'));
      li.addEventListener('drop', (ev) => {
        ev.preventDefault();
        const from = this.dragFrom;
        this.dragFrom = null;
        if (from !== null) this.move(from, i);
      });
      this.list.append(li);
    });
  }

  value() {
    return this.entries.map((e) => ({
      provider: e.provider, model: e.model.trim(), weight: Number(e.weight), tier: Number(e.tier), high_cost: Boolean(e.high_cost),
    }));
  }
}

function routeFields(r, isNew) {
  return [
    isNew ? field('Name', 'name', { required: true, hint: 'What clients send as the model' }) : null,
    field('Strategy', 'strategy', { kind: 'select', options: STRATEGIES.map((s) => [s]), value: r.strategy ?? 'ordered' }),
    field('Capability', 'capability', { kind: 'select', options: CAPABILITIES.map((s) => [s]), value: r.capability ?? 'chat' }),
    field('Role', 'role', { kind: 'select', options: ROLES, value: r.role ?? '' }),
    field('Aliases', 'aliases', { value: (r.aliases || []).join(', '), hint: 'comma list; names, aliases and roles share one namespace' }),
    field('Failover budget (ms)', 'fallback_timeout_ms', { kind: 'number', value: r.fallback_timeout_ms ?? '', hint: 'empty: the data plane default' }),
  ];
}

function routeBody(f, entries) {
  const fb = f.elements.fallback_timeout_ms.value.trim();
  return {
    strategy: f.elements.strategy.value,
    capability: f.elements.capability.value,
    role: f.elements.role.value || null,
    aliases: csv(f.elements.aliases.value),
    fallback_timeout_ms: fb === '' ? null : Number(fb),
    entries: entries.value(),
  };
}

function planView(plan) {
  const out = el('div.plan', { dataset: { status: String(plan.status) } });
  out.append(el('p', {},
    `Snapshot ${plan.snapshot_version}: `, el('strong', { text: plan.model }),
    plan.via ? ` via ${plan.via} ${plan.route ?? ''} (strategy ${plan.strategy})` : ' (an exact or bare selector)',
    ' → ', badge(String(plan.status), plan.status === 200 ? 'ok' : 'down'),
    plan.code ? ` ${plan.code}: ${plan.message ?? ''}` : ''));
  out.append(el('h3', { text: 'Would try, in order' }));
  out.append(plan.candidates.length
    ? el('ol.candidates', {}, plan.candidates.map((c) => el('li', { text: `${c.provider}/${c.model}${c.tier ? ` (tier ${c.tier})` : ''}${c.high_cost ? ' (high cost)' : ''}` })))
    : el('p.bad', { text: 'Nothing: a request would fail.' }));
  out.append(el('h3', { text: 'Skipped' }));
  out.append(table('Targets the router would skip', [
    ['Target', (s) => `${s.provider}/${s.model}`],
    ['Reason', (s) => badge(s.reason, 'down')],
    ['Detail', (s) => s.detail || ''],
  ], plan.skips || [], { empty: 'None skipped.' }));
  out.append(el('p.hint', { text: `Route order before filters: ${plan.order.map((o) => `${o.provider}/${o.model}`).join(', ') || '—'}.` }));
  if (plan.note) out.append(el('p.hint', { text: `Note: ${plan.note}.` }));
  return out;
}

function planSection(defaultModel) {
  const result = el('div.plan-result', { 'aria-live': 'polite' });
  const f = form('Preview the plan', [
    field('Model (route, alias, role or provider/model)', 'model', { value: defaultModel, required: true }),
    field('Capabilities needed', 'capabilities', { hint: 'comma list, e.g. tools, vision, json_mode, reasoning' }),
    field('Input tokens', 'input_tokens', { kind: 'number' }),
    field('Key id', 'key_id', { hint: 'applies the key\'s allowlists' }),
  ], {
    submit: 'Preview',
    write: false,
    onSubmit: async (fm) => {
      clear(result);
      const r = await api.get('/v1/admin/plan', {
        model: fm.elements.model.value.trim(),
        capabilities: csv(fm.elements.capabilities.value).join(','),
        input_tokens: fm.elements.input_tokens.value.trim(),
        key_id: fm.elements.key_id.value.trim(),
      });
      result.append(planView(r.json));
    },
  });
  return section('Plan preview: what the router would try for a sample request', f, result);
}

async function editor(root, ctx, name) {
  const isNew = name === '~new';
  const providers = await api.list('/v1/admin/providers');
  let item = { entries: [{ provider: providers[0]?.name ?? '', model: '' }] };
  let etag = null;
  if (!isNew) ({ item, etag } = await api.one(`/v1/admin/routes/${api.enc(name)}`));
  const entries = new EntriesEditor(item.entries, providers);
  const f = form(isNew ? 'New route' : `Edit route ${name}`, [routeFields(item, isNew), entries.root], {
    submit: isNew ? 'Create route' : 'Save route',
    onReload: () => ctx.refresh(),
    onSubmit: async (fm) => {
      const b = routeBody(fm, entries);
      if (isNew) {
        b.name = fm.elements.name.value.trim();
        await api.call('POST', '/v1/admin/routes', { body: b });
        ctx.navigate(`#/routes/${api.enc(b.name)}`);
      } else {
        const r = await api.call('PATCH', `/v1/admin/routes/${api.enc(name)}`, { body: b, etag });
        etag = r.etag;
        ctx.refresh();
        return;
      }
    },
    extra: [button('Back to routes', () => ctx.navigate('#/routes'))],
  });
  root.append(section(isNew ? 'New route' : `Route ${name} (version ${item.version})`, f));
  if (!isNew) {
    root.append(el('p.saved', { role: 'status', text: `Version ${item.version}, updated ${fmtTime(item.updated_at)}` }));
    root.append(planSection(name));
  }
}

export async function render(root, ctx) {
  if (ctx.rest[0]) {
    await editor(root, ctx, ctx.rest[0]);
    return;
  }
  const routes = await api.list('/v1/admin/routes');
  root.append(el('div.actions', {}, button('New route', () => ctx.navigate('#/routes/~new'), { write: true })));
  root.append(section('Routes', table('Routes', [
    ['Name', (r) => el('a', { href: `#/routes/${api.enc(r.name)}`, text: r.name })],
    ['Aliases', (r) => (r.aliases || []).join(', ') || '—'],
    ['Capability', (r) => r.capability],
    ['Role', (r) => r.role || '—'],
    ['Strategy', (r) => r.strategy],
    ['Entries', (r) => el('ol.inline', {}, r.entries.map((e) => el('li', {
      text: `${e.provider}/${e.model}${r.strategy === 'weighted' ? ` ×${e.weight}` : ''}${e.tier ? ` tier ${e.tier}` : ''}${e.high_cost ? ' (high cost)' : ''}`,
    })))],
    ['Actions', (r) => el('div.row-actions', {},
      button('Edit', () => ctx.navigate(`#/routes/${api.enc(r.name)}`), { write: true, label: `Edit route ${r.name}` }),
      deleteItem(`route ${r.name}`, `/v1/admin/routes/${api.enc(r.name)}`, ctx))],
  ], routes, { empty: 'No route yet.', rowAttrs: (r) => ({ dataset: { name: r.name } }) })));
  if (!routes.length) root.append(notice('Clients name a route as their model; create one with New route.'));
  root.append(planSection(routes[0]?.name ?? ''));
}
