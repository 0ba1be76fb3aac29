// Keys, Teams and Projects: who may call the gateway, and under what.
import * as api from './api.js';
import { el, clear, field, form, table, section, button, badge, act, csvOrNull, fmtTime, notice } from './dom.js';
import { deleteItem, editItem, patchItem } from './items.js';

const listText = (a) => (a == null ? 'any' : (a.join(', ') || 'none'));

function allowFields(x) {
  return [
    field('Allowed routes', 'allow_routes', { value: (x.allow_routes || []).join(', '), hint: 'comma list; empty: any' }),
    field('Allowed providers', 'allow_providers', { value: (x.allow_providers || []).join(', '), hint: 'comma list; empty: any' }),
    field('Allowed models', 'allow_models', { value: (x.allow_models || []).join(', '), hint: 'provider/model or a model id; empty: any' }),
  ];
}

function allowBody(f) {
  return {
    allow_routes: csvOrNull(f.elements.allow_routes.value),
    allow_providers: csvOrNull(f.elements.allow_providers.value),
    allow_models: csvOrNull(f.elements.allow_models.value),
  };
}

/** datetime-local text (local time) ↔ RFC 3339 UTC */
function toLocalInput(iso) {
  if (!iso) return '';
  const d = new Date(iso);
  const pad = (n) => String(n).padStart(2, '0');
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())}T${pad(d.getHours())}:${pad(d.getMinutes())}`;
}
function fromLocalInput(v) {
  return v ? new Date(v).toISOString() : null;
}

// ---- Keys -------------------------------------------------------------

function keyFields(k, teams, projects, isNew) {
  return [
    isNew ? field('Key id', 'id', { hint: 'empty: key_ and 16 random hex digits' }) : null,
    field('Name', 'name', { value: k.name ?? '' }),
    field('Team', 'team', { kind: 'select', value: k.team ?? '', options: [['', 'none'], ...teams.map((t) => [t.name])] }),
    field('Project', 'project', { kind: 'select', value: k.project ?? '', options: [['', 'none'], ...projects.map((p) => [p.name, `${p.name} (team ${p.team})`])] }),
    field('Expires at (local time)', 'expires_at', { kind: 'datetime-local', value: toLocalInput(k.expires_at), hint: 'empty: never' }),
    ...allowFields(k),
  ];
}

function keyBody(f) {
  return {
    name: f.elements.name.value,
    team: f.elements.team.value || null,
    project: f.elements.project.value || null,
    expires_at: fromLocalInput(f.elements.expires_at.value),
    ...allowBody(f),
  };
}

function createdPanel(k) {
  const id = 'created-key';
  const input = el('input.secret-once', { id, type: 'text', readOnly: true, value: k.key, spellcheck: false, autocomplete: 'off' });
  const status = el('span.copy-status', { role: 'status' });
  return section(`Key ${k.id} created`,
    notice('This is the only time the key is shown: copy it now.', 'warn'),
    el('div.field', {}, el('label', { htmlFor: id, text: `Plaintext of ${k.id}` }), input),
    el('div.actions', {}, button('Copy', async () => {
      try {
        await navigator.clipboard.writeText(k.key);
        status.textContent = 'Copied.';
      } catch {
        input.select();
        status.textContent = 'Selected: press Ctrl+C (or Cmd+C) to copy.';
      }
    }, { label: `Copy key ${k.id}` }), status));
}

export async function renderKeys(root, ctx) {
  const [keys, teams, projects] = await Promise.all([
    api.list('/v1/admin/keys'), api.list('/v1/admin/teams'), api.list('/v1/admin/projects'),
  ]);
  const id = ctx.rest[0];
  if (id) {
    await editItem(root, ctx, {
      path: `/v1/admin/keys/${api.enc(id)}`, back: '#/keys', label: `Edit key ${id}`, submit: 'Save key',
      title: (k) => `Key ${id} (version ${k.version})`,
      fields: (k) => [...keyFields(k, teams, projects, false),
        field('Status', 'status', { kind: 'select', value: k.status, options: [['active'], ['disabled']] })],
      body: (fm) => ({ ...keyBody(fm), status: fm.elements.status.value }),
    });
    return;
  }
  const created = el('div.created');
  root.append(created);
  root.append(section('API keys', table('API keys', [
    ['Id', (k) => k.id],
    ['Name', (k) => k.name || '—'],
    ['Prefix', (k) => el('code', { text: `${k.prefix}…` })],
    ['Status', (k) => badge(k.status, k.status === 'active' ? 'ok' : 'down')],
    ['Team / project', (k) => `${k.team ?? '—'} / ${k.project ?? '—'}`],
    ['Expires', (k) => (k.expires_at ? fmtTime(k.expires_at) : 'never')],
    ['Routes', (k) => listText(k.allow_routes)],
    ['Actions', (k) => el('div.row-actions', {},
      button('Edit', () => ctx.navigate(`#/keys/${api.enc(k.id)}`), { write: true, label: `Edit key ${k.id}` }),
      button(k.status === 'active' ? 'Disable' : 'Enable',
        () => patchItem(`/v1/admin/keys/${api.enc(k.id)}`, { status: k.status === 'active' ? 'disabled' : 'active' }, ctx),
        { write: true, label: `${k.status === 'active' ? 'Disable' : 'Enable'} key ${k.id}` }),
      deleteItem(`key ${k.id}`, `/v1/admin/keys/${api.enc(k.id)}`, ctx))],
  ], keys, { empty: 'No key yet.', rowAttrs: (k) => ({ dataset: { id: k.id } }) })));
  root.append(section('New key', form('New key', keyFields({}, teams, projects, true), {
    submit: 'Create key',
    onSubmit: async (fm) => {
      const b = keyBody(fm);
      const kid = fm.elements.id.value.trim();
      if (kid) b.id = kid;
      const r = await api.call('POST', '/v1/admin/keys', { body: b });
      // Show the plaintext once, above a fresh list; the page is not re-routed so it stays.
      const fresh = el('div');
      await renderKeys(fresh, { ...ctx, rest: [] });
      clear(root);
      root.append(...fresh.childNodes);
      const slot = root.querySelector('.created');
      slot.append(createdPanel(r.json));
      slot.querySelector('input')?.focus();
    },
  })));
}

// ---- Teams ------------------------------------------------------------

function teamFields(t, isNew) {
  return [
    isNew ? field('Name', 'name', { required: true }) : null,
    field('Description', 'description', { value: t.description ?? '' }),
    ...allowFields(t),
    field('Require a budget (a key with no cost limit is refused)', 'require_budget', { kind: 'checkbox', value: t.require_budget }),
  ];
}
function teamBody(f) {
  return { description: f.elements.description.value, ...allowBody(f), require_budget: f.elements.require_budget.checked };
}

export async function renderTeams(root, ctx) {
  const name = ctx.rest[0];
  if (name) {
    await editItem(root, ctx, {
      path: `/v1/admin/teams/${api.enc(name)}`, back: '#/teams', label: `Edit team ${name}`, submit: 'Save team',
      title: (t) => `Team ${name} (version ${t.version})`, fields: (t) => teamFields(t, false), body: teamBody,
    });
    return;
  }
  const teams = await api.list('/v1/admin/teams');
  root.append(section('Teams', table('Teams', [
    ['Name', (t) => t.name],
    ['Description', (t) => t.description || '—'],
    ['Routes', (t) => listText(t.allow_routes)],
    ['Providers', (t) => listText(t.allow_providers)],
    ['Models', (t) => listText(t.allow_models)],
    ['Budget required', (t) => (t.require_budget ? 'yes' : 'no')],
    ['Actions', (t) => el('div.row-actions', {},
      button('Edit', () => ctx.navigate(`#/teams/${api.enc(t.name)}`), { write: true, label: `Edit team ${t.name}` }),
      deleteItem(`team ${t.name}`, `/v1/admin/teams/${api.enc(t.name)}`, ctx))],
  ], teams, { empty: 'No team yet.' })));
  root.append(section('New team', form('New team', teamFields({}, true), {
    submit: 'Create team',
    onSubmit: async (fm) => {
      await api.call('POST', '/v1/admin/teams', { body: { name: fm.elements.name.value.trim(), ...teamBody(fm) } });
      ctx.refresh();
    },
  })));
}

// ---- Projects ---------------------------------------------------------

function projectFields(p, teams, isNew) {
  return [
    isNew ? field('Name', 'name', { required: true }) : null,
    field('Team', 'team', { kind: 'select', value: p.team ?? teams[0]?.name, options: teams.map((t) => [t.name]) }),
    field('Description', 'description', { value: p.description ?? '' }),
    ...allowFields(p),
  ];
}
function projectBody(f) {
  return { team: f.elements.team.value, description: f.elements.description.value, ...allowBody(f) };
}

export async function renderProjects(root, ctx) {
  const teams = await api.list('/v1/admin/teams');
  const name = ctx.rest[0];
  if (name) {
    await editItem(root, ctx, {
      path: `/v1/admin/projects/${api.enc(name)}`, back: '#/projects', label: `Edit project ${name}`, submit: 'Save project',
      title: (p) => `Project ${name} (version ${p.version})`, fields: (p) => projectFields(p, teams, false), body: projectBody,
    });
    return;
  }
  const projects = await api.list('/v1/admin/projects');
  root.append(section('Projects', table('Projects', [
    ['Name', (p) => p.name],
    ['Team', (p) => p.team],
    ['Description', (p) => p.description || '—'],
    ['Routes', (p) => listText(p.allow_routes)],
    ['Providers', (p) => listText(p.allow_providers)],
    ['Models', (p) => listText(p.allow_models)],
    ['Actions', (p) => el('div.row-actions', {},
      button('Edit', () => ctx.navigate(`#/projects/${api.enc(p.name)}`), { write: true, label: `Edit project ${p.name}` }),
      deleteItem(`project ${p.name}`, `/v1/admin/projects/${api.enc(p.name)}`, ctx))],
  ], projects, { empty: 'No project yet.' })));
  if (!teams.length) {
    root.append(notice('A project belongs to a team: create a team first.'));
    return;
  }
  root.append(section('New project', form('New project', projectFields({}, teams, true), {
    submit: 'Create project',
    onSubmit: async (fm) => {
      await api.call('POST', '/v1/admin/projects', { body: { name: fm.elements.name.value.trim(), ...projectBody(fm) } });
      ctx.refresh();
    },
  })));
}
