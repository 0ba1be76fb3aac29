// Small DOM helpers: elements built with DOM APIs (no innerHTML of data,
// no inline style or handlers: the CSP forbids them), labelled form
// fields, tables, and the way every form shows the API's errors.

let uid = 0;

/** el('tag.class1.class2', {attrs, on, text, dataset, ...props}, ...children) */
export function el(spec, props = {}, ...children) {
  const [tag, ...classes] = spec.split('.');
  const e = document.createElement(tag || 'div');
  if (classes.length) e.className = classes.join(' ');
  for (const [k, v] of Object.entries(props || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === 'on') {
      for (const [ev, fn] of Object.entries(v)) e.addEventListener(ev, fn);
    } else if (k === 'text') {
      e.textContent = String(v);
    } else if (k === 'dataset') {
      Object.assign(e.dataset, v);
    } else if (k === 'class') {
      e.className = [e.className, v].filter(Boolean).join(' ');
    } else if (k in e && k !== 'list' && k !== 'form') {
      e[k] = v;
    } else {
      e.setAttribute(k, v === true ? '' : String(v));
    }
  }
  append(e, children);
  return e;
}

function append(parent, children) {
  for (const c of children.flat(Infinity)) {
    if (c === null || c === undefined || c === false) continue;
    parent.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
}

export function clear(node) {
  while (node.firstChild) node.firstChild.remove();
  return node;
}

export function nextId(prefix = 'f') {
  uid += 1;
  return `${prefix}-${uid}`;
}

/** A labelled field: label + control (+ hint); the control gets an id
 * and a name. kind: input type, 'select' (options: [[value, text]]),
 * 'textarea' or 'checkbox'. */
export function field(label, name, { kind = 'text', value, options = [], hint, required, attrs = {} } = {}) {
  const id = nextId(name.replace(/[^a-z0-9]/gi, '-'));
  let control;
  if (kind === 'select') {
    control = el('select', { id, name, required, ...attrs },
      options.map(([v, t]) => el('option', { value: v, text: t ?? v })));
    if (value !== undefined && value !== null) control.value = String(value);
  } else if (kind === 'textarea') {
    control = el('textarea', { id, name, required, ...attrs });
    if (value !== undefined && value !== null) control.value = String(value);
  } else if (kind === 'checkbox') {
    control = el('input', { id, name, type: 'checkbox', ...attrs });
    control.checked = Boolean(value);
  } else {
    control = el('input', { id, name, type: kind, required, autocomplete: 'off', ...attrs });
    if (value !== undefined && value !== null) control.value = String(value);
  }
  const hintEl = hint ? el('span.hint', { id: `${id}-hint`, text: hint }) : null;
  if (hintEl) control.setAttribute('aria-describedby', hintEl.id);
  const wrap = el(`div.field${kind === 'checkbox' ? '.check' : ''}`, { dataset: { field: name } },
    kind === 'checkbox' ? [control, el('label', { htmlFor: id, text: label })] : [el('label', { htmlFor: id, text: label }), control],
    hintEl);
  return wrap;
}

/** A form that never submits natively (form-action 'none'): onSubmit(form)
 * runs instead, its errors shown on the form. */
export function form(label, fields, { submit = 'Save', onSubmit, onReload, write = true, extra = [] } = {}) {
  const status = el('div.form-error', { role: 'alert', 'aria-live': 'assertive' });
  const button = el('button.primary', { type: 'submit', text: submit, class: write ? 'write' : '' });
  const f = el('form', { 'aria-label': label, noValidate: true }, status, fields, el('div.actions', {}, button, extra));
  f.reload = onReload;
  f.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    clearErrors(f);
    button.disabled = true;
    try {
      await onSubmit(f);
    } catch (err) {
      showError(f, err);
    } finally {
      button.disabled = false;
    }
  });
  return f;
}

export function clearErrors(f) {
  for (const e of f.querySelectorAll('.field-error')) e.remove();
  for (const e of f.querySelectorAll('[aria-invalid]')) e.removeAttribute('aria-invalid');
  clear(f.querySelector('.form-error'));
}

/** Shows an error on a form: by the field the API's param names when the
 * form has it, else at the top; a 412 offers Reload. */
export function showError(f, err) {
  const top = f.querySelector('.form-error');
  const msg = err && err.display ? err.display : String(err && err.message ? err.message : err);
  if (err && err.isConflict) {
    top.append(el('p.conflict', { text: msg }));
    if (f.reload) {
      top.append(el('button', { type: 'button', text: 'Reload', class: 'reload', on: { click: () => f.reload() } }));
    }
    return;
  }
  const param = err && err.param;
  if (param && err.status === 400) {
    const names = [param, param.split(/[.[]/)[0]];
    for (const n of names) {
      const control = f.querySelector(`[name="${CSS.escape(n)}"]`);
      if (control) {
        const id = nextId('err');
        control.setAttribute('aria-invalid', 'true');
        control.setAttribute('aria-describedby', id);
        control.closest('.field, td, .entry')?.append(el('span.field-error', { id, text: msg }));
        control.focus();
        top.append(el('p', { text: `Please fix: ${param}.` }));
        return;
      }
    }
  }
  top.append(el('p', { text: msg }));
}

/** A table: columns [[heading, (row) => cell content]] */
export function table(caption, columns, rows, { empty = 'Nothing yet.', rowAttrs } = {}) {
  if (!rows.length) return el('p.empty', { text: empty });
  return el('div.table-wrap', {},
    el('table', {},
      el('caption', { text: caption }),
      el('thead', {}, el('tr', {}, columns.map(([h]) => el('th', { scope: 'col', text: h })))),
      el('tbody', {}, rows.map((r) => el('tr', rowAttrs ? rowAttrs(r) : {},
        columns.map(([h, f]) => el('td', { dataset: { col: h } }, f(r))))))));
}

export function button(text, onClick, { write = false, cls = '', label } = {}) {
  return el('button', {
    type: 'button', text, class: [write ? 'write' : '', cls].filter(Boolean).join(' '), 'aria-label': label,
    on: { click: onClick },
  });
}

/** A section with a heading. */
export function section(title, ...children) {
  const id = nextId('h');
  return el('section.card', { 'aria-labelledby': id }, el('h2', { id, text: title }), children);
}

/** The page's notice area: a status message anyone can read. */
export function notice(text, kind = 'info') {
  return el(`p.notice.${kind}`, { role: kind === 'error' ? 'alert' : 'status', text });
}

export function csv(text) {
  const parts = String(text || '').split(',').map((s) => s.trim()).filter(Boolean);
  return parts;
}

/** A comma list field's value: null (any) when empty. */
export function csvOrNull(text) {
  const p = csv(text);
  return p.length ? p : null;
}

export function fmtTime(iso) {
  if (!iso) return '';
  return String(iso).replace('T', ' ').replace(/\.\d+/, '').replace('+00:00', 'Z');
}

export function fmtMs(ms) {
  if (!ms) return '—';
  return new Date(Number(ms)).toISOString().replace('T', ' ').replace(/\.\d+Z$/, 'Z');
}

export function badge(text, kind) {
  return el(`span.badge.${kind || text}`, { text });
}

/** Shows a message in the page's banner (errors of buttons outside a form). */
export function banner(errOrText, reload) {
  const b = clear(document.getElementById('banner'));
  if (!errOrText) return;
  const msg = typeof errOrText === 'string' ? errOrText : (errOrText.display || errOrText.message);
  const conflict = typeof errOrText !== 'string' && errOrText.isConflict;
  b.append(el('p', { text: msg }));
  if (conflict && reload) b.append(el('button', { type: 'button', text: 'Reload', class: 'reload', on: { click: () => { banner(''); reload(); } } }));
}

/** Runs a button's action; its error goes to the banner. */
export async function act(fn, reload) {
  banner('');
  try {
    return await fn();
  } catch (err) {
    if (err && err.status === 401) return undefined;
    banner(err, reload);
    return undefined;
  }
}

/** A delete button that asks once more on the button itself (no dialogs). */
export function deleteButton(what, onConfirm) {
  const b = el('button.danger.write', { type: 'button', text: 'Delete', 'aria-label': `Delete ${what}` });
  b.addEventListener('click', async () => {
    if (!b.dataset.armed) {
      b.dataset.armed = 'true';
      b.textContent = 'Confirm delete';
      b.setAttribute('aria-label', `Confirm: delete ${what}`);
      return;
    }
    await act(onConfirm);
  });
  b.addEventListener('blur', () => {
    delete b.dataset.armed;
    b.textContent = 'Delete';
    b.setAttribute('aria-label', `Delete ${what}`);
  });
  return b;
}
