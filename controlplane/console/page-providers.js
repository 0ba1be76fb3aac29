// Providers: list, create, edit, enable/disable, delete; each one's
// credential health from GET /v1/admin/health.
import * as api from './api.js';
import { el, field, form, table, section, button, badge, act, csv, notice } from './dom.js';
import { deleteItem, patchItem } from './items.js';

const DRIVERS = ['openai', 'openai-responses', 'anthropic', 'bedrock', 'gemini', 'ollama'];
const CAPS = 'chat, embeddings, vision, tools, json_mode, reasoning, transcription, speech, image';

function fields(p, secrets, isNew) {
  return [
    isNew ? field('Name', 'name', { required: true, hint: '1 to 128 characters, no / or spaces' }) : null,
    field('Driver', 'driver', { kind: 'select', options: DRIVERS.map((d) => [d]), value: p.driver ?? 'openai' }),
    field('Base URL', 'base_url', { kind: 'url', value: p.base_url ?? '', required: true, hint: 'e.g. https://api.openai.com/v1' }),
    field('Credential (secret)', 'credential_ref', {
      kind: 'select', value: p.credential_ref ?? '',
      options: [['', 'none'], ...secrets.map((s) => [s.name])],
    }),
    field('Capabilities (narrow the driver\'s)', 'capabilities', {
      value: (p.options?.capabilities || []).join(', '), hint: `comma list of: ${CAPS}; empty: the driver's`,
    }),
    field('First-byte timeout (ms)', 'first_byte_timeout_ms', { kind: 'number', value: p.first_byte_timeout_ms ?? 60000 }),
    field('Idle timeout (ms)', 'idle_timeout_ms', { kind: 'number', value: p.idle_timeout_ms ?? 60000 }),
    field('Enabled', 'enabled', { kind: 'checkbox', value: p.enabled ?? true }),
  ];
}

function body(f, p) {
  const v = (n) => f.elements[n].value;
  const options = { ...(p.options || {}) };
  const caps = csv(v('capabilities'));
  if (caps.length) options.capabilities = caps;
  else delete options.capabilities;
  return {
    driver: v('driver'),
    base_url: v('base_url').trim(),
    credential_ref: v('credential_ref') || null,
    options,
    first_byte_timeout_ms: Number(v('first_byte_timeout_ms')),
    idle_timeout_ms: Number(v('idle_timeout_ms')),
    enabled: f.elements.enabled.checked,
  };
}

async function editor(root, ctx, name, secrets) {
  const { item, etag } = await api.one(`/v1/admin/providers/${api.enc(name)}`);
  const f = form(`Edit provider ${name}`, fields(item, secrets, false), {
    submit: 'Save provider',
    onReload: () => ctx.refresh(),
    onSubmit: async (fm) => {
      await api.call('PATCH', `/v1/admin/providers/${api.enc(name)}`, { body: body(fm, item), etag });
      ctx.navigate('#/providers');
    },
    extra: [button('Cancel', () => ctx.navigate('#/providers'))],
  });
  root.append(section(`Provider ${name} (version ${item.version})`, f));
}

export async function render(root, ctx) {
  const [providers, secrets, health] = await Promise.all([
    api.list('/v1/admin/providers'), api.list('/v1/admin/secrets'), api.get('/v1/admin/health'),
  ]);
  if (ctx.rest[0]) {
    await editor(root, ctx, ctx.rest[0], secrets);
    return;
  }
  const cred = new Map((health.json.providers || []).map((p) => [p.name, p]));
  root.append(section('Providers', table('Providers', [
    ['Name', (p) => p.name],
    ['Driver', (p) => p.driver],
    ['Base URL', (p) => el('code', { text: p.base_url })],
    ['Enabled', (p) => badge(p.enabled ? 'enabled' : 'disabled', p.enabled ? 'ok' : 'down')],
    ['Credential', (p) => {
      const c = cred.get(p.name);
      return [p.credential_ref ? `${p.credential_ref}: ` : '', badge(c?.credential || 'none'), c?.reason ? ` ${c.reason}` : ''];
    }],
    ['Actions', (p) => el('div.row-actions', {},
      button('Edit', () => ctx.navigate(`#/providers/${api.enc(p.name)}`), { write: true, label: `Edit provider ${p.name}` }),
      button(p.enabled ? 'Disable' : 'Enable', () => patchItem(`/v1/admin/providers/${api.enc(p.name)}`, { enabled: !p.enabled }, ctx),
        { write: true, label: `${p.enabled ? 'Disable' : 'Enable'} provider ${p.name}` }),
      deleteItem(`provider ${p.name}`, `/v1/admin/providers/${api.enc(p.name)}`, ctx))],
  ], providers, { empty: 'No provider yet: create one below.', rowAttrs: (p) => ({ dataset: { name: p.name } }) })));
  if (!secrets.length) root.append(notice('A provider that needs an API key takes it from a secret: create the secret first (Secrets page).'));
  const f = form('New provider', fields({}, secrets, true), {
    submit: 'Create provider',
    onSubmit: async (fm) => {
      await api.call('POST', '/v1/admin/providers', { body: { name: fm.elements.name.value.trim(), ...body(fm, {}) } });
      ctx.refresh();
    },
  });
  root.append(section('New provider', f));
}
