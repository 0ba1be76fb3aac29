// Audit: who changed what, when (GET /v1/admin/audit, newest first).
import * as api from './api.js';
import { el, table, section, button, fmtTime } from './dom.js';
import { stringifyExact } from './api.js';

const PAGE = 50;

/** The fields an update changed: [field, before, after]. */
function changes(row) {
  const b = row.before || {};
  const a = row.after || {};
  const skip = new Set(['updated_at', 'version', 'created_at']);
  const keys = [...new Set([...Object.keys(b), ...Object.keys(a)])].filter((k) => !skip.has(k));
  return keys.filter((k) => stringifyExact(b[k]) !== stringifyExact(a[k])).map((k) => [k, b[k], a[k]]);
}

const show = (v) => (v === undefined ? '—' : stringifyExact(v));

export async function render(root, ctx) {
  const offset = Math.max(0, Number(ctx.query.get('offset') || 0));
  const rows = await api.list('/v1/admin/audit', { limit: PAGE, offset });
  root.append(section('Changes, newest first', table('Audit rows', [
    ['At', (r) => fmtTime(r.at)],
    ['Who', (r) => r.actor],
    ['Action', (r) => r.action],
    ['What', (r) => `${r.resource} ${r.resource_id}`],
    ['Config version', (r) => String(r.config_version)],
    ['Changes', (r) => {
      const c = r.action === 'update' ? changes(r) : [];
      const d = el('details', {}, el('summary', {
        text: r.action === 'update' ? `${c.length} field${c.length === 1 ? '' : 's'}: ${c.map((x) => x[0]).join(', ')}` : (r.action === 'create' ? 'created' : 'deleted'),
      }));
      if (r.action === 'update') {
        d.append(el('table.diff', {}, el('caption', { text: 'Before and after' }),
          el('thead', {}, el('tr', {}, el('th', { scope: 'col', text: 'Field' }), el('th', { scope: 'col', text: 'Before' }), el('th', { scope: 'col', text: 'After' }))),
          el('tbody', {}, c.map(([k, b, a]) => el('tr', {}, el('td', { text: k }), el('td', {}, el('code', { text: show(b) })), el('td', {}, el('code', { text: show(a) })))))));
      } else {
        d.append(el('pre', { text: stringifyExact(r.after || r.before, 2) }));
      }
      return d;
    }],
  ], rows, { empty: 'No change recorded.' })),
  el('div.actions', {},
    button('Newer', () => ctx.navigate(`#/audit?offset=${Math.max(0, offset - PAGE)}`), { label: 'Newer changes' }),
    button('Older', () => ctx.navigate(`#/audit?offset=${offset + PAGE}`), { label: 'Older changes' })));
  const [newer, older] = root.querySelectorAll('.actions button');
  newer.disabled = offset === 0;
  older.disabled = rows.length < PAGE;
}
