// Secrets: write-only values. The list never shows one; a new value
// replaces the sealed one.
import * as api from './api.js';
import { el, field, form, table, section, button, fmtTime } from './dom.js';
import { deleteItem } from './items.js';

const BACKENDS = [['builtin', 'builtin (sealed with the master key)'], ['vault', 'Vault'], ['aws', 'AWS Secrets Manager']];

async function editor(root, ctx, name) {
  const { item, etag } = await api.one(`/v1/admin/secrets/${api.enc(name)}`);
  const f = form(`Replace secret ${name}`, [
    field('Backend', 'backend', { kind: 'select', options: BACKENDS, value: item.backend }),
    field('New value (builtin)', 'value', { kind: 'password', hint: 'Empty keeps the sealed value. Never shown again.' }),
    field('Reference (vault or aws)', 'backend_ref', { value: item.backend_ref ?? '', hint: 'vault:<mount>/<path>#<field> or awssm:<secret-id>[#<field>]' }),
  ], {
    submit: 'Save secret',
    onReload: () => ctx.refresh(),
    onSubmit: async (fm) => {
      const b = { backend: fm.elements.backend.value };
      if (fm.elements.value.value) b.value = fm.elements.value.value;
      b.backend_ref = b.backend === 'builtin' ? null : (fm.elements.backend_ref.value.trim() || null);
      await api.call('PATCH', `/v1/admin/secrets/${api.enc(name)}`, { body: b, etag });
      ctx.navigate('#/secrets');
    },
    extra: [button('Cancel', () => ctx.navigate('#/secrets'))],
  });
  root.append(section(`Secret ${name} (version ${item.version})`, f));
}

export async function render(root, ctx) {
  if (ctx.rest[0]) {
    await editor(root, ctx, ctx.rest[0]);
    return;
  }
  const secrets = await api.list('/v1/admin/secrets');
  root.append(section('Secrets', el('p', { text: 'Values are write-only: the control plane never returns them.' }),
    table('Secrets', [
      ['Name', (s) => s.name],
      ['Backend', (s) => s.backend],
      ['Reference', (s) => s.backend_ref || '—'],
      ['Sealed with', (s) => s.master_key_id || '—'],
      ['Updated', (s) => fmtTime(s.updated_at)],
      ['Actions', (s) => el('div.row-actions', {},
        button('Replace', () => ctx.navigate(`#/secrets/${api.enc(s.name)}`), { write: true, label: `Replace secret ${s.name}` }),
        deleteItem(`secret ${s.name}`, `/v1/admin/secrets/${api.enc(s.name)}`, ctx))],
    ], secrets, { empty: 'No secret yet.' })));
  root.append(section('New secret', form('New secret', [
    field('Name', 'name', { required: true }),
    field('Backend', 'backend', { kind: 'select', options: BACKENDS, value: 'builtin' }),
    field('Value (builtin)', 'value', { kind: 'password', hint: 'Sealed by the control plane; never shown again' }),
    field('Reference (vault or aws)', 'backend_ref', { hint: 'vault:<mount>/<path>#<field> or awssm:<secret-id>[#<field>]' }),
  ], {
    submit: 'Create secret',
    onSubmit: async (fm) => {
      const b = { name: fm.elements.name.value.trim(), backend: fm.elements.backend.value };
      if (b.backend === 'builtin') b.value = fm.elements.value.value;
      else b.backend_ref = fm.elements.backend_ref.value.trim();
      await api.call('POST', '/v1/admin/secrets', { body: b });
      ctx.refresh();
    },
  })));
}
