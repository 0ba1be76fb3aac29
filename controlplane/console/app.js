// The console's entry: sign-in, the navigation (by hash), and the pages.
import * as api from './api.js';
import { el, clear, notice } from './dom.js';
import * as overview from './page-overview.js';
import * as providers from './page-providers.js';
import * as secrets from './page-secrets.js';
import * as routes from './page-routes.js';
import * as access from './page-access.js';
import * as limits from './page-limits.js';
import * as usage from './page-usage.js';
import * as ledger from './page-ledger.js';
import * as audit from './page-audit.js';

const PAGES = {
  overview: ['Overview', overview.render],
  providers: ['Providers', providers.render],
  secrets: ['Secrets', secrets.render],
  routes: ['Routes', routes.render],
  keys: ['Keys', access.renderKeys],
  teams: ['Teams', access.renderTeams],
  projects: ['Projects', access.renderProjects],
  limits: ['Limits', limits.render],
  usage: ['Usage', usage.render],
  ledger: ['Ledger', ledger.render],
  audit: ['Audit', audit.render],
};

const $ = (id) => document.getElementById(id);
const session = { actor: null, scope: null };
let renderSeq = 0;

function showBanner(text) {
  const b = clear($('banner'));
  if (text) b.append(el('p', { text }));
}

function showSignIn(message) {
  session.actor = null;
  session.scope = null;
  document.body.classList.remove('scope-read');
  $('app').hidden = true;
  $('signout').hidden = true;
  clear($('who'));
  clear($('main'));
  $('signin').hidden = false;
  const e = clear($('signin-error'));
  if (message) e.append(el('p', { text: message }));
  $('token').focus();
}

async function whoami() {
  const r = await api.get('/v1/admin/whoami');
  session.actor = r.json.actor;
  session.scope = r.json.scope;
  api.setScope(session.scope);
  document.body.classList.toggle('scope-read', session.scope === 'read');
  const who = clear($('who'));
  who.append(`Signed in as ${session.actor} · scope ${session.scope}`);
  $('signout').hidden = false;
  $('signin').hidden = true;
  $('app').hidden = false;
}

async function signIn(token) {
  api.setToken(token);
  try {
    await whoami();
  } catch (err) {
    api.clearToken();
    showSignIn(err.display || err.message);
    return;
  }
  $('token').value = '';
  if (!location.hash || location.hash === '#' || location.hash === '#/') location.hash = '#/overview';
  else route();
}

function signOut(message) {
  api.clearToken();
  showSignIn(message || 'Signed out.');
}

/** The hash: #/page/rest?query */
function parseHash() {
  const h = location.hash.replace(/^#\/?/, '');
  const [pathPart, queryPart] = h.split('?');
  const [page, ...rest] = pathPart.split('/');
  return { page: page || 'overview', rest: rest.map(decodeURIComponent), query: new URLSearchParams(queryPart || '') };
}

export function navigate(hash) {
  if (location.hash === hash) route();
  else location.hash = hash;
}

async function route() {
  if (!api.getToken() || !session.scope) return;
  const { page, rest, query } = parseHash();
  const entry = PAGES[page];
  const main = clear($('main'));
  showBanner('');
  for (const a of document.querySelectorAll('#nav a')) {
    if (a.getAttribute('href') === `#/${page}`) a.setAttribute('aria-current', 'page');
    else a.removeAttribute('aria-current');
  }
  if (!entry) {
    main.append(el('h1', { text: 'Not found' }), notice(`No page called ${page}.`));
    return;
  }
  const seq = ++renderSeq;
  const [title, render] = entry;
  document.title = `${title} · llmgw console`;
  const h1 = el('h1', { text: title });
  const body = el('div.page', { dataset: { page, hash: location.hash, seq: String(seq) } });
  main.append(h1, body);
  if (session.scope === 'read') body.append(notice('This token has scope read: you can look at everything, and changes are disabled.'));
  const ctx = {
    scope: session.scope, actor: session.actor, rest, query, navigate,
    current: () => seq === renderSeq,
    refresh: () => route(),
  };
  body.setAttribute('aria-busy', 'true');
  try {
    await render(body, ctx);
  } catch (err) {
    if (seq === renderSeq && !(err instanceof api.ApiError && err.status === 401)) {
      body.append(notice(err.display || err.message, 'error'));
    }
  } finally {
    body.removeAttribute('aria-busy');
    if (seq === renderSeq) body.dataset.ready = 'true';
  }
}

function start() {
  api.onUnauthorized((err) => signOut(err.display));
  api.onForbidden(() => {
    whoami().catch(() => {});
  });
  $('signin-form').addEventListener('submit', (ev) => {
    ev.preventDefault();
    const t = $('token').value.trim();
    if (!t) {
      showSignIn('Paste an admin token first.');
      return;
    }
    signIn(t);
  });
  $('signout').addEventListener('click', () => signOut('Signed out.'));
  window.addEventListener('hashchange', () => route());
  window.addEventListener('unhandledrejection', (ev) => {
    const err = ev.reason;
    if (err && err.display) {
      ev.preventDefault();
      showBanner(err.display);
    }
  });
  const t = api.getToken();
  if (t) signIn(t);
  else showSignIn('');
}

start();
