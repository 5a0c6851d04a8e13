// durafeed dashboard: a small single-page app over the service's JSON API
// (package httpapi). Plain JavaScript module, no build step, no
// dependencies; served by package dashboard under a strict
// Content-Security-Policy (no inline script or style).
//
// Rules this file keeps:
//   - Text from the API reaches the page through textContent only (never
//     innerHTML), so no answer can inject markup.
//   - The bearer token lives in sessionStorage only. It is sent in the
//     Authorization header of API requests, and nowhere else: never to the
//     console, the URL, localStorage or a cookie.
//   - Nothing is written to the console, so no payload or token can be.
//   - A field missing from an answer is shown as "—".

const TOKEN_KEY = 'durafeed.token';
const API_ROOT = new URL('../', document.baseURI); // the service's root, whatever prefix serves /ui/
const PAGE_SIZE = 25;
const HISTORY_LIMIT = 500;
const LIST_REFRESH_MS = 5000;
const INSTANCE_REFRESH_MS = 3000;
const ENGINE_REFRESH_MS = 2000;
const DASH = '—';
const TERMINAL = new Set(['Completed', 'Failed', 'Terminated', 'Cancelled', 'Canceled']);
const ROLE_RANK = { 'Durafeed.Reader': 1, 'Durafeed.Operator': 2, 'Durafeed.Admin': 3 };
const STATUS_FILTERS = [['', 'Any'], ['Running', 'Running'], ['Completed', 'Completed'], ['Failed', 'Failed'], ['ContinuedAsNew', 'Continued as new']];
const STATES = {
  Running: ['running', '●', 'Running'],
  Pending: ['pending', '○', 'Pending'],
  Completed: ['completed', '✓', 'Completed'],
  Failed: ['failed', '✕', 'Failed'],
  ContinuedAsNew: ['continued', '↻', 'Continued as new'],
  Terminated: ['cancelled', '⊘', 'Terminated'],
  Cancelled: ['cancelled', '⊘', 'Cancelled'],
  Canceled: ['cancelled', '⊘', 'Cancelled'],
  Suspended: ['pending', '‖', 'Suspended'],
  NotFound: ['unknown', '?', 'Not found'],
};
const SPAN_KINDS = {
  turn: 'Turn', activity: 'Activity', timer: 'Timer', suborchestration: 'Sub-orchestration',
  event: 'Event', continueAsNew: 'Continue as new',
};
const SPAN_STATUS = {
  completed: ['✓', 'completed'], failed: ['✕', 'failed'], pending: ['…', 'pending'], cancelled: ['⊘', 'cancelled'],
};

const $main = document.getElementById('main');
const $who = document.getElementById('who');
const $notice = document.getElementById('notice');

const state = {
  me: null, // the answer of GET /v1/me, or null when unknown
  memToken: '', // the token when sessionStorage is unavailable
};

// ---------------------------------------------------------------- DOM

// h builds an element: h('a', {href: '#/x', class: 'c'}, 'text', child).
// Attributes are set as attributes (never a style attribute: the policy
// forbids them; positions are set through element.style), "on..." props
// become listeners, children are nodes or text.
function h(tag, props, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(props || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === 'class') e.className = v;
    else if (k.startsWith('on') && typeof v === 'function') e.addEventListener(k.slice(2), v);
    else if (k === 'value') e.value = v;
    else e.setAttribute(k, v === true ? '' : String(v));
  }
  for (const c of children.flat(Infinity)) {
    if (c === undefined || c === null || c === false) continue;
    e.append(c instanceof Node ? c : String(c));
  }
  return e;
}

function button(label, onclick, props = {}) {
  return h('button', { type: 'button', ...props, onclick }, label);
}

// field wraps a control with its label.
function field(label, control, hint) {
  if (!control.id) control.id = 'f-' + Math.random().toString(36).slice(2);
  return h('div', { class: 'field' }, h('label', { for: control.id }, label), control, hint ? h('p', { class: 'hint' }, hint) : null);
}

// table builds a table whose cells carry their column's name, so that
// narrow screens can show each row as a card.
function table(props, headers, rows, empty) {
  const body = rows.length
    ? rows.map(r => h('tr', r.props || {}, r.cells.map((c, i) => h('td', { 'data-label': headers[i] }, c))))
    : [h('tr', { class: 'empty' }, h('td', { colspan: String(headers.length) }, empty || 'None.'))];
  return h('table', { class: 'grid cards', ...props },
    h('thead', {}, h('tr', {}, headers.map(t => h('th', { scope: 'col' }, t)))),
    h('tbody', {}, body));
}

// swap replaces container's children with build()'s, keeping what the
// person was doing: open <details>, sideways scroll, the focused control.
function swap(container, nodes) {
  const open = new Map();
  container.querySelectorAll('details[data-key]').forEach(d => open.set(d.dataset.key, d.open));
  const scroll = new Map();
  container.querySelectorAll('[data-scroll-key]').forEach(s => scroll.set(s.dataset.scrollKey, s.scrollLeft));
  const active = document.activeElement;
  const focusKey = active && active !== container && container.contains(active) ? (active.id || active.dataset.key || null) : null;
  container.replaceChildren(...nodes.flat(Infinity).filter(n => n !== undefined && n !== null && n !== false));
  container.querySelectorAll('details[data-key]').forEach(d => { if (open.has(d.dataset.key)) d.open = open.get(d.dataset.key); });
  container.querySelectorAll('[data-scroll-key]').forEach(s => { if (scroll.has(s.dataset.scrollKey)) s.scrollLeft = scroll.get(s.dataset.scrollKey); });
  if (focusKey) {
    const target = document.getElementById(focusKey) || container.querySelector(`[data-key="${CSS.escape(focusKey)}"]`);
    if (target) target.focus({ preventScroll: true });
  }
}

// refreshTimes brings the relative times under container up to date in
// place (a refresh whose data did not change re-renders nothing else,
// so that nothing under the pointer or the focus moves).
function refreshTimes(container) {
  for (const el of container.querySelectorAll('time[datetime]')) {
    const t = Date.parse(el.getAttribute('datetime'));
    if (Number.isFinite(t)) el.textContent = ago(t);
  }
}

// ---------------------------------------------------------------- formatting

function show(v) {
  if (v === undefined || v === null || v === '') return DASH;
  if (typeof v === 'object') return JSON.stringify(v);
  return String(v);
}

function has(o, k) {
  return o !== null && typeof o === 'object' && Object.prototype.hasOwnProperty.call(o, k) && o[k] !== undefined;
}

// parseTime returns a time in ms, or null (Go's zero time counts as none).
function parseTime(v) {
  if (typeof v !== 'string' && typeof v !== 'number') return null;
  const t = typeof v === 'number' ? v : Date.parse(v);
  return Number.isFinite(t) && t > 0 ? t : null;
}

function num(v, digits = 1) {
  return typeof v === 'number' && Number.isFinite(v) ? v.toLocaleString('en', { maximumFractionDigits: digits }) : DASH;
}

function duration(ms) {
  if (typeof ms !== 'number' || !Number.isFinite(ms)) return DASH;
  ms = Math.max(0, ms);
  if (ms === 0) return '0 ms';
  if (ms < 1) return '<1 ms';
  if (ms < 1000) return Math.round(ms) + ' ms';
  const s = ms / 1000;
  if (s < 60) return (s < 10 ? s.toFixed(1) : Math.round(s)) + ' s';
  const m = Math.floor(s / 60);
  if (m < 60) return m + ' min ' + Math.round(s % 60) + ' s';
  const hrs = Math.floor(m / 60);
  if (hrs < 48) return hrs + ' h ' + (m % 60) + ' min';
  return Math.floor(hrs / 24) + ' d ' + (hrs % 24) + ' h';
}

function ago(t) {
  const s = (Date.now() - t) / 1000;
  if (s < -5) return 'in ' + duration(-s * 1000);
  if (s < 2) return 'just now';
  if (s < 60) return Math.floor(s) + ' s ago';
  if (s < 3600) return Math.floor(s / 60) + ' min ago';
  if (s < 172800) return Math.floor(s / 3600) + ' h ago';
  return Math.floor(s / 86400) + ' d ago';
}

// timeEl shows a time relative to now, with the exact time as its title.
function timeEl(v) {
  const t = parseTime(v);
  if (t === null) return DASH;
  const d = new Date(t);
  return h('time', { datetime: d.toISOString(), title: d.toLocaleString() }, ago(t));
}

// pretty formats a JSON value for a <pre>: strings holding JSON are
// parsed first, other strings are shown as they are.
function pretty(v) {
  if (typeof v === 'string') {
    const s = v.trim();
    if (s.startsWith('{') || s.startsWith('[')) {
      try { return JSON.stringify(JSON.parse(s), null, 2); } catch { return v; }
    }
    return v;
  }
  return JSON.stringify(v, null, 2);
}

function badge(st, props = {}) {
  const s = typeof st === 'string' && st ? st : 'Unknown';
  const [cls, icon, label] = STATES[s] || ['unknown', '?', s];
  return h('span', { class: 'badge state-' + cls, 'data-state': s, ...props },
    h('span', { class: 'icon', 'aria-hidden': 'true' }, icon), label);
}

// ---------------------------------------------------------------- the API

class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

function getToken() {
  try { return sessionStorage.getItem(TOKEN_KEY) || ''; } catch { return state.memToken; }
}

function setToken(t) {
  state.memToken = t || '';
  try {
    if (t) sessionStorage.setItem(TOKEN_KEY, t);
    else sessionStorage.removeItem(TOKEN_KEY);
  } catch { /* storage off: the token lives until the tab reloads */ }
}

function cleanToken(t) {
  return String(t || '').trim().replace(/^Bearer\s+/i, '').trim();
}

// takeFragmentToken moves a token given as #token=... to sessionStorage
// and takes it out of the address bar (and of the tab's history).
function takeFragmentToken() {
  const m = /^#token=([^&]*)/.exec(location.hash);
  if (!m) return false;
  let t = m[1];
  try { t = decodeURIComponent(t); } catch { /* kept as given */ }
  t = cleanToken(t);
  if (t) setToken(t);
  history.replaceState(null, '', location.pathname + location.search + '#/instances');
  return true;
}

// api calls the service: path is relative to its root (no leading /).
// It resolves to {status, data}; an answer that is not 2xx rejects with
// an ApiError carrying the API's error code and message. A 401 shows the
// sign-in box too.
async function api(method, path, { body, headers } = {}) {
  const hdrs = new Headers(headers || {});
  hdrs.set('Accept', 'application/json');
  const tok = getToken();
  if (tok) hdrs.set('Authorization', 'Bearer ' + tok);
  let resp;
  try {
    resp = await fetch(new URL(path, API_ROOT), { method, headers: hdrs, body, cache: 'no-store', credentials: 'omit', redirect: 'error' });
  } catch (e) {
    throw new ApiError(0, 'network', 'The service did not answer (' + (e && e.message ? e.message : 'network error') + ').');
  }
  let data = null;
  try {
    const text = await resp.text();
    data = text ? JSON.parse(text) : null;
  } catch { data = null; }
  if (!resp.ok) {
    const e = data && typeof data === 'object' && data.error && typeof data.error === 'object' ? data.error : {};
    const err = new ApiError(resp.status, typeof e.code === 'string' ? e.code : 'http_' + resp.status,
      typeof e.message === 'string' ? e.message : (resp.statusText || 'The request failed.'));
    if (resp.status === 401) signInRequired(err);
    throw err;
  }
  return { status: resp.status, data };
}

// errorBox shows an API error: its status, code and message.
function errorBox(err, lead) {
  const e = err instanceof ApiError ? err : new ApiError(0, 'error', String(err && err.message ? err.message : err));
  return h('div', { class: 'error', role: 'alert', 'data-code': e.code },
    lead ? h('p', {}, lead) : null,
    h('p', {}, h('strong', { class: 'code' }, (e.status ? e.status + ' ' : '') + e.code), ': ', e.message));
}

function roleRank() {
  const roles = state.me && Array.isArray(state.me.roles) ? state.me.roles : [];
  return roles.reduce((m, r) => Math.max(m, ROLE_RANK[r] || 0), 0);
}
const canOperate = () => roleRank() >= 2;
const canAdmin = () => roleRank() >= 3;

// loadMe reads who the caller is; false when the API asked for a token.
async function loadMe() {
  try {
    const { data } = await api('GET', 'v1/me');
    state.me = data && typeof data === 'object' ? data : null;
  } catch (e) {
    state.me = null;
    if (e.status === 401) { renderWho(); return false; }
  }
  renderWho();
  return true;
}

function renderWho() {
  const me = state.me;
  const tok = getToken();
  const parts = [];
  if (me && me.authenticated) {
    const rank = roleRank();
    const role = Object.keys(ROLE_RANK).find(r => ROLE_RANK[r] === rank);
    parts.push(h('span', { class: 'who-line' }, h('span', { class: 'muted' }, 'Signed in as '),
      h('strong', { id: 'who-name' }, show(me.name || me.subject))));
    parts.push(h('span', { class: 'role', id: 'who-role' }, role ? role.replace('Durafeed.', '') : 'no role'));
  } else if (me && me.authenticated === false && roleRank() > 0 && !tok) {
    // The API runs without authentication: everyone may do everything.
    parts.push(h('span', { class: 'muted who-line', id: 'who-open' }, 'Open API: no sign-in'));
    parts.push(h('span', { class: 'role', id: 'who-role' }, 'Admin'));
  } else {
    parts.push(h('span', { class: 'muted who-line' }, tok ? 'Token set' : 'Not signed in'));
  }
  if (tok) parts.push(button('Sign out', signOut, { id: 'sign-out', class: 'link' }));
  else if (!(me && me.authenticated === false && roleRank() > 0)) {
    parts.push(button('Sign in', () => mount(signInView, { error: null }), { id: 'sign-in', class: 'link' }));
  }
  $who.replaceChildren(...parts);
}

async function signOut() {
  setToken('');
  state.me = null;
  notify('Signed out.', { keep: true });
  if (await loadMe()) route();
}

let noticeTimer = 0;
let noticeKept = false;
// notify shows a short notice; keep carries it over the navigation the
// action itself makes (any other navigation clears it).
function notify(text, { keep = false } = {}) {
  noticeKept = keep;
  $notice.textContent = text;
  $notice.classList.add('shown');
  clearTimeout(noticeTimer);
  noticeTimer = setTimeout(() => { $notice.textContent = ''; $notice.classList.remove('shown'); }, 6000);
}

// ---------------------------------------------------------------- views and routes

let current = null; // the mounted view: {name, stop?, showError?}
let seq = 0;

// mount stops the current view and starts view(ctx, arg). ctx.alive()
// tells a view's late answers whether the view is still the one shown.
function mount(view, arg, { focus = false } = {}) {
  if (current && current.stop) current.stop();
  const mine = ++seq;
  $main.removeAttribute('data-ready');
  $main.dataset.view = view.viewName;
  let focused = !focus;
  const ctx = {
    alive: () => mine === seq,
    show(...nodes) {
      if (mine !== seq) return;
      $main.replaceChildren(...nodes);
    },
    ready() {
      if (mine !== seq) return;
      $main.dataset.ready = '1';
      if (!focused) {
        focused = true;
        const h1 = $main.querySelector('h1');
        if (h1) h1.focus({ preventScroll: true });
      }
    },
  };
  current = { name: view.viewName, stop: null };
  const r = view(ctx, arg);
  if (mine === seq) current = { name: view.viewName, ...(r || {}) };
}

function parseRoute() {
  const raw = location.hash.replace(/^#\/?/, '');
  const q = raw.indexOf('?');
  const path = q < 0 ? raw : raw.slice(0, q);
  const query = new URLSearchParams(q < 0 ? '' : raw.slice(q + 1));
  if (path === '' || path === 'instances') return { view: instancesView, arg: { query } };
  if (path.startsWith('instances/')) {
    let id = path.slice('instances/'.length);
    try { id = decodeURIComponent(id); } catch { /* as given */ }
    return { view: instanceView, arg: { id } };
  }
  if (path === 'engine') return { view: engineView, arg: {} };
  return { view: notFoundView, arg: { path } };
}

function route({ focus = true } = {}) {
  takeFragmentToken();
  if (!noticeKept) {
    $notice.textContent = '';
    $notice.classList.remove('shown');
  }
  noticeKept = false;
  const r = parseRoute();
  for (const a of document.querySelectorAll('[data-nav]')) {
    const on = a.dataset.nav === (r.view === instanceView ? 'instances' : r.view.viewName);
    if (on) a.setAttribute('aria-current', 'page'); else a.removeAttribute('aria-current');
  }
  mount(r.view, r.arg, { focus });
}

function signInRequired(err) {
  state.me = null;
  renderWho();
  if (current && current.name === 'signin' && current.showError) {
    current.showError(err);
    return;
  }
  mount(signInView, { error: err });
}

// poller runs fn now and then every ms (a number or a function giving
// it) while the page is visible and no dialog is open; a run never
// overlaps the previous one.
function poller(fn, ms) {
  let timer = 0;
  let stopped = false;
  let running = false;
  let again = false;
  const interval = () => (typeof ms === 'function' ? ms() : ms);
  async function tick() {
    timer = 0;
    if (stopped) return;
    if (document.visibilityState === 'visible' && !document.querySelector('dialog[open]')) {
      running = true;
      try {
        await fn();
      } catch (e) {
        // fn shows the API's errors; anything else is a bug: let it
        // surface as an uncaught error (its message, never a payload).
        setTimeout(() => { throw e; });
      }
      running = false;
    }
    if (stopped) return;
    if (again) { again = false; tick(); return; }
    timer = setTimeout(tick, interval());
  }
  function now() {
    if (stopped) return;
    if (running) { again = true; return; }
    clearTimeout(timer);
    tick();
  }
  const onVisible = () => { if (document.visibilityState === 'visible') now(); };
  document.addEventListener('visibilitychange', onVisible);
  return {
    start: tick,
    now,
    stop() {
      stopped = true;
      clearTimeout(timer);
      document.removeEventListener('visibilitychange', onVisible);
    },
  };
}

function titleRow(title, ...extra) {
  return h('div', { class: 'title-row' }, h('h1', { tabindex: '-1' }, title), ...extra);
}

// ---------------------------------------------------------------- sign-in

function signInView(ctx, { error }) {
  const input = h('input', {
    id: 'token-input', type: 'password', autocomplete: 'off', spellcheck: 'false', autocapitalize: 'off',
    'aria-describedby': 'token-help',
  });
  const errSlot = h('div', { id: 'signin-error' }, error ? errorBox(error, 'The API did not accept the request without a valid token.') : null);
  const form = h('form', { class: 'card signin', id: 'signin-form', novalidate: true },
    field('Access token', input),
    h('p', { id: 'token-help', class: 'hint' },
      'A bearer token for this API, holding one of the app roles Durafeed.Reader, Durafeed.Operator or Durafeed.Admin. ' +
      'It is kept in this tab\'s session storage only and sent only to this service.'),
    errSlot,
    h('div', { class: 'buttons' }, h('button', { type: 'submit', class: 'primary', id: 'token-submit' }, 'Sign in')));
  form.addEventListener('submit', async ev => {
    ev.preventDefault();
    const t = cleanToken(input.value);
    input.value = '';
    if (!t) {
      errSlot.replaceChildren(errorBox(new ApiError(0, 'no_token', 'Paste a token first.')));
      input.focus();
      return;
    }
    setToken(t);
    if (await loadMe()) route();
  });
  ctx.show(
    titleRow('Sign in'),
    form,
    h('p', { class: 'hint' }, 'Interactive sign-in with Entra ID is not built yet. Get a token for the API from your identity ' +
      'provider, for example with the Azure CLI: ', h('code', {}, 'az account get-access-token --scope api://<API client id>/.default --query accessToken -o tsv'), '.'));
  ctx.ready();
  input.focus();
  return {
    name: 'signin',
    showError(err) {
      errSlot.replaceChildren(errorBox(err, 'The token was not accepted.'));
      input.focus();
    },
  };
}
signInView.viewName = 'signin';

function notFoundView(ctx, { path }) {
  ctx.show(titleRow('Not found'), h('p', {}, 'There is no view ', h('code', {}, '#/' + path), '. ',
    h('a', { href: '#/instances' }, 'See the instances'), '.'));
  ctx.ready();
}
notFoundView.viewName = 'notfound';

// ---------------------------------------------------------------- instances

// localInput turns an RFC 3339 time into a datetime-local input's value
// (local time, minutes); '' for none or a bad one.
function localInput(iso) {
  const t = iso ? new Date(iso) : null;
  if (!t || isNaN(t.getTime())) return '';
  const pad = n => String(n).padStart(2, '0');
  return t.getFullYear() + '-' + pad(t.getMonth() + 1) + '-' + pad(t.getDate()) + 'T' + pad(t.getHours()) + ':' + pad(t.getMinutes());
}

function instancesView(ctx, { query }) {
  const filter = { status: query.get('status') || '', name: query.get('name') || '',
    from: query.get('createdFrom') || '', to: query.get('createdTo') || '' };
  const tokens = ['']; // the continuation token of each page seen
  let page = 0;
  let next = '';
  let shown = ''; // the rows shown, as JSON

  const statusSel = h('select', { id: 'filter-status', name: 'status' },
    STATUS_FILTERS.map(([v, label]) => h('option', { value: v, selected: v === filter.status }, label)));
  // The name is matched exactly (case-sensitive) by the API.
  const nameIn = h('input', { id: 'filter-name', name: 'name', type: 'text', value: filter.name, autocomplete: 'off', spellcheck: 'false',
    placeholder: 'e.g. Approval', title: 'The exact orchestration name (case-sensitive)' });
  // Creation time: the inputs show local time, the API takes RFC 3339.
  const fromIn = h('input', { id: 'filter-from', name: 'createdFrom', type: 'datetime-local', value: localInput(filter.from) });
  const toIn = h('input', { id: 'filter-to', name: 'createdTo', type: 'datetime-local', value: localInput(filter.to) });
  const filtered = filter.status || filter.name || filter.from || filter.to;
  const filterForm = h('form', { class: 'filters', 'aria-label': 'Filter the instances' },
    field('Status', statusSel), field('Name', nameIn), field('Created from', fromIn), field('Created before', toIn),
    h('div', { class: 'buttons' }, h('button', { type: 'submit', id: 'filter-apply' }, 'Filter'),
      filtered ? h('a', { href: '#/instances', class: 'button-like' }, 'Clear') : null));
  filterForm.addEventListener('submit', ev => {
    ev.preventDefault();
    const p = new URLSearchParams();
    if (statusSel.value) p.set('status', statusSel.value);
    if (nameIn.value.trim()) p.set('name', nameIn.value.trim());
    for (const [k, input] of [['createdFrom', fromIn], ['createdTo', toIn]]) {
      const t = input.value ? new Date(input.value) : null;
      if (t && !isNaN(t.getTime())) p.set(k, t.toISOString());
    }
    const target = '#/instances' + (p.toString() ? '?' + p : '');
    if (location.hash === target) route(); else location.hash = target;
  });
  const idIn = h('input', { id: 'open-id', name: 'id', type: 'search', autocomplete: 'off', spellcheck: 'false', placeholder: 'instance id' });
  const openForm = h('form', { class: 'open', role: 'search', 'aria-label': 'Open an instance by its id' },
    field('Instance id', idIn), h('div', { class: 'buttons' }, h('button', { type: 'submit', id: 'open-submit' }, 'Open')));
  openForm.addEventListener('submit', ev => {
    ev.preventDefault();
    const v = idIn.value.trim();
    if (v) location.hash = '#/instances/' + encodeURIComponent(v);
  });

  const errSlot = h('div', { id: 'list-error' });
  const listSlot = h('div', { class: 'table-wrap', id: 'instances' });
  const updated = h('p', { class: 'muted updated', id: 'list-updated' });
  const prev = button('← Previous', () => { if (page > 0) { page--; poll.now(); } }, { id: 'page-prev', disabled: true });
  const nextBtn = button('Next →', () => { if (next) { tokens[page + 1] = next; page++; poll.now(); } }, { id: 'page-next', disabled: true });
  const pageLabel = h('span', { id: 'page-label', class: 'muted' }, 'Page 1');

  ctx.show(titleRow('Instances', updated), h('div', { class: 'toolbar card' }, filterForm, openForm), errSlot, listSlot,
    h('nav', { class: 'pager', 'aria-label': 'Pages' }, prev, pageLabel, nextBtn));

  function row(r) {
    const id = typeof r.instanceId === 'string' ? r.instanceId : '';
    const st = r.status || r.state;
    return {
      props: { 'data-id': id },
      cells: [
        badge(st),
        h('span', {}, show(r.name), r.version ? h('span', { class: 'muted small' }, ' ' + r.version) : null),
        id ? h('a', { href: '#/instances/' + encodeURIComponent(id), class: 'mono', 'data-key': 'row-' + id }, id) : DASH,
        timeEl(r.createdAt),
        show(r.customStatus),
      ],
    };
  }

  // fetchPage reads one page of the list from token; the API applies
  // every filter.
  async function fetchPage(token, size) {
    const p = new URLSearchParams({ pageSize: String(size) });
    if (filter.status) p.set('status', filter.status);
    if (filter.name) p.set('name', filter.name);
    if (filter.from) p.set('createdFrom', filter.from);
    if (filter.to) p.set('createdTo', filter.to);
    if (token) p.set('continuationToken', token);
    const { data } = await api('GET', 'v1/instances?' + p);
    return {
      rows: (data && Array.isArray(data.instances) ? data.instances : []).filter(r => r && typeof r === 'object'),
      next: data && typeof data.continuationToken === 'string' ? data.continuationToken : '',
    };
  }

  async function load() {
    try {
      const got = await fetchPage(tokens[page], PAGE_SIZE);
      const rows = got.rows;
      next = got.next;
      if (!ctx.alive()) return;
      errSlot.replaceChildren();
      const key = JSON.stringify([page, next, rows]);
      if (key !== shown) {
        shown = key;
        swap(listSlot, [table({ id: 'instances-table' }, ['State', 'Name', 'Instance id', 'Age', 'Custom status'], rows.map(row),
          filtered ? 'No instances match the filter' + (next ? ' on this page: try the next.' : '.') : 'No instances yet.')]);
      } else {
        refreshTimes(listSlot);
      }
      updated.replaceChildren('Updated ', timeEl(new Date().toISOString()), ' · every 5 s');
    } catch (e) {
      if (!ctx.alive() || e.status === 401) return;
      errSlot.replaceChildren(errorBox(e, 'The list could not be read.'));
    }
    prev.disabled = page === 0;
    nextBtn.disabled = !next;
    pageLabel.textContent = 'Page ' + (page + 1);
    ctx.ready();
  }
  const poll = poller(load, LIST_REFRESH_MS);
  poll.start();
  return { stop: poll.stop };
}
instancesView.viewName = 'instances';

// ---------------------------------------------------------------- one instance

function instanceView(ctx, { id }) {
  const path = 'v1/instances/' + encodeURIComponent(id);
  const body = h('div', { class: 'instance', id: 'instance' });
  ctx.show(h('nav', { class: 'crumbs', 'aria-label': 'Breadcrumb' }, h('a', { href: '#/instances' }, '← Instances')), body);
  let last = '';
  let st = null;
  let running = true;

  async function load() {
    const [s, hi] = await Promise.allSettled([api('GET', path), api('GET', path + '/history?limit=' + HISTORY_LIMIT)]);
    if (!ctx.alive()) return;
    if ((s.status === 'rejected' && s.reason.status === 401) || (hi.status === 'rejected' && hi.reason.status === 401)) return;
    st = s.status === 'fulfilled' && s.value.data && typeof s.value.data === 'object' ? s.value.data : null;
    const stErr = s.status === 'rejected' ? s.reason : null;
    const hist = hi.status === 'fulfilled' && hi.value.data && typeof hi.value.data === 'object' ? hi.value.data : null;
    const histErr = hi.status === 'rejected' ? hi.reason : null;
    running = !st || !TERMINAL.has(st.state || st.status);
    const key = JSON.stringify([st, hist, stErr && [stErr.status, stErr.code, stErr.message], histErr && [histErr.status, histErr.code], canOperate(), canAdmin()]);
    if (key !== last) {
      last = key;
      swap(body, render(st, stErr, hist, histErr));
    } else {
      refreshTimes(body);
    }
    ctx.ready();
  }

  function render(st, stErr, hist, histErr) {
    const out = [];
    const execs = hist && Array.isArray(hist.executions)
      ? hist.executions.filter(x => x && typeof x === 'object').sort((a, b) => (Number(a.executionId) || 0) - (Number(b.executionId) || 0)) : [];
    const events = execs.flatMap(x => (Array.isArray(x.events) ? x.events : []).filter(e => e && typeof e === 'object'));
    const lastExec = execs.length ? execs[execs.length - 1] : null;
    const started = lastExec && Array.isArray(lastExec.events) ? lastExec.events.find(e => e && e.kind === 'OrchestrationStarted') : null;
    if (!st) {
      out.push(h('div', { class: 'card instance-head' }, h('h1', { tabindex: '-1' }, 'Instance'), h('p', {}, h('code', { id: 'instance-id' }, id)),
        errorBox(stErr || new ApiError(0, 'no_status', 'The status answer was empty.'),
          stErr && stErr.status === 404 ? 'No such instance (yet: an instance shows once its first turn has run).' : 'The status could not be read.')));
    } else {
      const stateName = st.state || st.status;
      const times = events.map(e => parseTime(e.timestamp)).filter(t => t !== null);
      const created = st.createdAt || st.created || (times.length ? Math.min(...times) : null);
      const updated = st.lastUpdatedAt || st.updatedAt || (times.length ? Math.max(...times) : null);
      out.push(h('header', { class: 'card instance-head' },
        h('div', { class: 'head-line' }, h('h1', { tabindex: '-1', id: 'instance-name' }, show(st.name)), badge(stateName, { id: 'instance-state' }),
          st.version ? h('span', { class: 'muted' }, 'version ' + st.version) : null),
        h('p', { class: 'instance-id' }, h('span', { class: 'muted' }, 'Instance '), h('code', { id: 'instance-id' }, show(st.instanceId || id))),
        h('dl', { class: 'facts' },
          fact('Created', timeEl(created)), fact('Updated', timeEl(updated)), fact('Execution', show(st.executionId)),
          fact('Custom status', h('span', { id: 'instance-custom-status' }, show(st.customStatus))),
          st.parentInstanceId ? fact('Parent', h('a', { href: '#/instances/' + encodeURIComponent(st.parentInstanceId), class: 'mono' }, st.parentInstanceId)) : null),
        actions(stateName)));
      out.push(h('section', { class: 'card', 'aria-labelledby': 'data-title' }, h('h2', { id: 'data-title' }, 'Data'),
        jsonBlock('Input', 'input', has(st, 'input') ? st.input : started && has(started, 'input') ? started.input : undefined),
        jsonBlock('Output', 'output', st.output),
        st.failure !== undefined && st.failure !== null ? jsonBlock('Error', 'failure', st.failure, true) : null,
        jsonBlock('Custom status', 'custom-status', st.customStatus),
        kvBlock(st, events, hist)));
    }
    out.push(h('section', { class: 'card', 'aria-labelledby': 'timeline-title' },
      h('div', { class: 'title-row' }, h('h2', { id: 'timeline-title' }, 'Timeline'), legend()),
      timeline(hist, histErr, execs)));
    out.push(h('section', { class: 'card', 'aria-labelledby': 'events-title' }, h('h2', { id: 'events-title' }, 'Events'),
      eventsBlock(execs, events, histErr)));
    return out;
  }

  function fact(label, value) {
    return h('div', {}, h('dt', {}, label), h('dd', {}, value));
  }

  function actions(stateName) {
    const live = !TERMINAL.has(stateName);
    const acts = [];
    if (live && canOperate()) {
      acts.push(button('Raise event…', raiseDialog, { id: 'action-raise', 'data-action': 'raise', class: 'primary' }));
      acts.push(button('Cancel…', cancelDialog, { id: 'action-cancel', 'data-action': 'cancel', class: 'warn' }));
    }
    if (canAdmin()) acts.push(button('Delete…', () => deleteDialog(live), { id: 'action-delete', 'data-action': 'delete', class: 'danger' }));
    acts.push(button('Refresh', () => poll.now(), { id: 'action-refresh' }));
    return h('div', { class: 'actions', role: 'group', 'aria-label': 'Actions' }, acts);
  }

  // after an accepted event or cancel: wait (server side, bounded) for
  // the instance to move on, then refresh.
  async function followUp() {
    poll.now();
    try { await api('GET', path + '?wait=10s'); } catch { /* the refresh shows it */ }
    if (ctx.alive()) poll.now();
  }

  function raiseDialog() {
    const name = h('input', { id: 'raise-name', type: 'text', autocomplete: 'off', spellcheck: 'false', required: true });
    const data = h('textarea', { id: 'raise-data', rows: '6', spellcheck: 'false', placeholder: '{"approved": true}' });
    openDialog({
      id: 'raise', title: 'Raise an event', submit: 'Raise event',
      body: [h('p', { class: 'hint' }, 'Sends an event to ', h('code', {}, id), '. An orchestration waiting for that name receives the data.'),
        field('Event name', name), field('Data (JSON)', data, 'Empty means null.')],
      async onSubmit(key) {
        const n = name.value.trim();
        if (!n) throw new ApiError(0, 'invalid_name', 'Give the event a name.');
        const raw = data.value.trim() || 'null';
        try { JSON.parse(raw); } catch { throw new ApiError(0, 'bad_json', 'The data is not valid JSON.'); }
        await api('POST', path + '/events/' + encodeURIComponent(n), { body: raw, headers: { 'Content-Type': 'application/json', 'Idempotency-Key': key } });
        notify('Event "' + n + '" raised.');
        followUp();
      },
    });
  }

  function cancelDialog() {
    const reason = h('input', { id: 'cancel-reason', type: 'text', autocomplete: 'off' });
    openDialog({
      id: 'cancel', title: 'Cancel the instance', submit: 'Cancel instance', danger: true,
      body: [h('p', {}, 'The instance ends Failed, with the reason. Running activities finish but their results are dropped.'),
        field('Reason', reason, 'Optional.')],
      async onSubmit(key) {
        const r = reason.value.trim();
        await api('POST', path + '/cancel', { body: JSON.stringify(r ? { reason: r } : {}), headers: { 'Content-Type': 'application/json', 'Idempotency-Key': key } });
        notify('Cancellation requested.');
        followUp();
      },
    });
  }

  function deleteDialog(live) {
    const force = h('input', { id: 'delete-force', type: 'checkbox' });
    openDialog({
      id: 'delete', title: 'Delete the instance', submit: 'Delete', danger: true,
      body: [h('p', {}, 'Deletes ', h('code', {}, id), ', its history and its sub-orchestrations. This cannot be undone.'),
        live ? h('div', { class: 'check' }, force, h('label', { for: 'delete-force' }, 'It is still running: delete it anyway (force)')) : null],
      async onSubmit() {
        await api('DELETE', path + (live && force.checked ? '?force=true' : ''));
        notify('Deleted ' + id + '.', { keep: true });
        location.hash = '#/instances';
      },
    });
  }

  const poll = poller(load, () => (running ? INSTANCE_REFRESH_MS : 4 * INSTANCE_REFRESH_MS));
  poll.start();
  return { stop: poll.stop };
}
instanceView.viewName = 'instance';

// kvBlock shows the instance's key-value state: the status's when it
// has one, else as the history shown writes it (none: no block).
function kvBlock(st, events, hist) {
  for (const k of ['keyValues', 'kv', 'values']) {
    if (has(st, k)) return jsonBlock('Key-value state', 'kv', st[k]);
  }
  const kv = {};
  let seen = false;
  for (const e of events) {
    if (e.kind === 'KeyValueSet' && typeof e.key === 'string') { kv[e.key] = e.value === undefined ? null : e.value; seen = true; }
    else if (e.kind === 'KeyValueCleared' && typeof e.key === 'string') { delete kv[e.key]; seen = true; }
    else if (e.kind === 'KeyValuesCleared') { for (const k of Object.keys(kv)) delete kv[k]; seen = true; }
  }
  if (!seen) return null;
  return jsonBlock('Key-value state' + (hist && hist.truncated ? ' (from the part of the history shown)' : ''), 'kv', kv);
}

function jsonBlock(title, key, value, isError = false) {
  const content = value === undefined
    ? h('p', { class: 'muted', id: 'block-' + key }, DASH)
    : h('pre', { class: 'json', id: 'block-' + key, tabindex: '0', 'data-scroll-key': 'pre-' + key }, pretty(value));
  return h('details', { class: 'block' + (isError ? ' error-block' : ''), 'data-key': key, open: true },
    h('summary', {}, title), content);
}

function legend() {
  return h('ul', { class: 'legend', 'aria-label': 'Legend' },
    Object.entries(SPAN_KINDS).map(([k, label]) => h('li', {}, h('span', { class: 'swatch k-' + k, 'aria-hidden': 'true' }), label)),
    h('li', {}, h('span', { class: 'swatch open-swatch', 'aria-hidden': 'true' }), 'pending (open-ended)'));
}

// timeline draws the history's spans on one time axis: a row per span,
// its bar from start to end (to now, open-ended, while pending).
function timeline(hist, histErr, execs) {
  if (histErr) return errorBox(histErr, 'The history could not be read.');
  if (!execs.length) return h('p', { class: 'muted', id: 'timeline-empty' }, hist ? 'No history yet.' : DASH);
  const now = Date.now();
  const byId = new Map();
  for (const x of execs) {
    for (const e of (Array.isArray(x.events) ? x.events : [])) {
      if (e && typeof e === 'object') byId.set(x.executionId + '/' + e.eventId, e);
    }
  }
  const groups = execs.map(x => ({
    x,
    spans: (Array.isArray(x.spans) ? x.spans : []).filter(s => s && typeof s === 'object')
      .map(s => ({ s, a: parseTime(s.start), b: parseTime(s.end), execId: x.executionId })),
  }));
  let t0 = Infinity;
  let t1 = -Infinity;
  for (const g of groups) {
    for (const sp of g.spans) {
      if (sp.a === null) continue;
      t0 = Math.min(t0, sp.a);
      t1 = Math.max(t1, sp.b !== null ? sp.b : (sp.s.status === 'pending' ? Math.max(now, sp.a) : sp.a));
    }
  }
  const timed = Number.isFinite(t0);
  const range = timed ? Math.max(t1 - t0, 1) : 1;
  const pos = t => ((t - t0) / range) * 100;

  const axis = h('div', { class: 'axis', 'aria-hidden': 'true' }, h('div', { class: 'span-label muted' }, timed ? 'from ' + new Date(t0).toLocaleTimeString() : ''),
    h('div', { class: 'track ticks' }, timed ? [0, 0.25, 0.5, 0.75, 1].map(f => {
      const tick = h('span', { class: 'tick' + (f === 0 ? ' first' : f === 1 ? ' last' : '') }, f === 0 ? '0' : '+' + duration(range * f));
      tick.style.left = f * 100 + '%';
      return tick;
    }) : null));

  const rows = groups.map(g => {
    const head = groups.length > 1 || g.x.executionId !== undefined
      ? h('h3', { class: 'exec-title' }, 'Execution ' + show(g.x.executionId)) : null;
    const list = g.spans.length
      ? h('ol', { class: 'spans' }, g.spans.map(sp => spanRow(sp, pos, now, byId)))
      : h('p', { class: 'muted' }, 'No spans.');
    return h('div', { class: 'exec' }, head, list);
  });
  return h('div', {},
    h('div', { class: 'timeline-scroll', id: 'timeline', tabindex: '0', role: 'region', 'aria-label': 'Timeline (scrolls sideways)', 'data-scroll-key': 'timeline' },
      h('div', { class: 'timeline' }, axis, rows)),
    hist && hist.truncated ? h('p', { class: 'hint' }, 'The history is longer than ' + HISTORY_LIMIT + ' events: only its first part is shown.') : null);
}

function spanRow(sp, pos, now, byId) {
  const s = sp.s;
  const kind = typeof s.kind === 'string' ? s.kind : 'span';
  const status = typeof s.status === 'string' ? s.status : 'unknown';
  const [icon, statusText] = SPAN_STATUS[status] || ['?', status];
  const open = sp.b === null && status === 'pending';
  const end = sp.b !== null ? sp.b : open ? Math.max(now, sp.a || now) : null;
  const dur = sp.a !== null && end !== null ? end - sp.a : null;
  const instant = sp.a !== null && sp.b !== null && sp.b === sp.a;
  const label = kind === 'turn' ? String(s.name || '').replace(/^turn\s*/i, '#') : kind === 'continueAsNew' ? '' : s.name ? String(s.name) : DASH;
  const nameNode = kind === 'suborchestration' && typeof s.childInstanceId === 'string' && s.childInstanceId
    ? h('a', { href: '#/instances/' + encodeURIComponent(s.childInstanceId), class: 'name' }, label || s.childInstanceId)
    : h('span', { class: 'name' }, label);
  const attempts = typeof s.attempts === 'number' ? s.attempts : null;
  const meta = [
    h('span', { class: 'status s-' + status }, h('span', { 'aria-hidden': 'true' }, icon + ' '), statusText),
    instant ? 'instant' : dur !== null ? (open ? 'for ' : '') + duration(dur) : null,
    attempts !== null && (attempts > 1 || kind === 'activity') ? attempts + (attempts === 1 ? ' attempt' : ' attempts') : null,
    kind === 'timer' && open ? timerDue(byId.get(sp.execId + '/' + s.scheduledId), now) : null,
  ].filter(Boolean);
  const bar = h('div', { class: (instant ? 'mark' : 'bar') + ' k-' + kind + ' s-' + status + (open ? ' open' : '') });
  if (sp.a !== null) {
    const left = pos(sp.a);
    if (instant) {
      bar.style.left = 'clamp(6px, ' + left + '%, calc(100% - 6px))';
    } else {
      bar.style.left = 'min(' + left + '%, calc(100% - 4px))';
      bar.style.width = Math.max(pos(end !== null ? end : sp.a) - left, 0) + '%';
    }
    bar.title = new Date(sp.a).toLocaleTimeString() + (sp.b !== null && !instant ? ' → ' + new Date(sp.b).toLocaleTimeString() : open ? ' → (pending)' : '');
  } else {
    bar.hidden = true;
  }
  return h('li', { class: 'span', 'data-kind': kind, 'data-status': status },
    h('div', { class: 'span-label' },
      h('span', { class: 'kind k-' + kind }, SPAN_KINDS[kind] || kind), nameNode ? ' ' : null, nameNode,
      h('span', { class: 'span-meta' }, meta.flatMap((m, i) => (i ? [' · ', m] : [m])))),
    h('div', { class: 'track', 'aria-hidden': 'true' }, bar));
}

// timerDue says when a pending timer fires, from its TimerCreated event.
function timerDue(ev, now) {
  const t = ev ? parseTime(ev.fireAt) : null;
  if (t === null) return null;
  return t > now ? 'fires in ' + duration(t - now) : 'due now';
}

function eventsBlock(execs, events, histErr) {
  if (histErr) return h('p', { class: 'muted' }, DASH);
  const rows = [];
  for (const x of execs) {
    const evs = (Array.isArray(x.events) ? x.events : []).filter(e => e && typeof e === 'object');
    const first = evs.map(e => parseTime(e.timestamp)).find(t => t !== null);
    for (const e of evs) {
      const rest = Object.fromEntries(Object.entries(e).filter(([k]) => k !== 'eventId' && k !== 'kind' && k !== 'timestamp'));
      let detail = Object.keys(rest).length ? JSON.stringify(rest) : DASH;
      if (detail.length > 400) detail = detail.slice(0, 400) + '…';
      const t = parseTime(e.timestamp);
      const at = t === null ? DASH : h('span', { title: new Date(t).toLocaleString() }, t === first ? new Date(t).toLocaleTimeString() : '+' + duration(t - first));
      rows.push({ cells: [show(x.executionId), show(e.eventId), show(e.kind), at, h('code', { class: 'detail' }, detail)] });
    }
  }
  return h('details', { class: 'block', 'data-key': 'events', id: 'events' },
    h('summary', {}, 'Raw events (' + events.length + ')'),
    h('div', { class: 'table-wrap', 'data-scroll-key': 'events' },
      table({ id: 'events-table' }, ['Execution', 'Id', 'Kind', 'Time', 'Details'], rows, 'No events.')));
}

// ---------------------------------------------------------------- dialogs

// openDialog shows a modal dialog (focus kept inside, Escape closes, the
// opener refocused after). onSubmit(idempotencyKey) runs on submit: a
// rejection is shown inline, with the API's code and message; success
// closes the dialog. The key is one per dialog, so a resubmission after
// a lost answer takes effect once.
function openDialog({ id, title, body, submit, danger = false, onSubmit }) {
  const opener = document.activeElement;
  const key = idempotencyKey();
  const errSlot = h('div', { class: 'dialog-error', id: id + '-error' });
  const submitBtn = h('button', { type: 'submit', id: id + '-submit', class: danger ? 'danger' : 'primary' }, submit);
  const dlg = h('dialog', { 'aria-labelledby': id + '-title', id: id + '-dialog', class: 'dialog' });
  const closeBtn = button('Close', () => dlg.close(), { id: id + '-close' });
  const form = h('form', { novalidate: true },
    h('h2', { id: id + '-title' }, title), body, errSlot, h('div', { class: 'buttons' }, closeBtn, submitBtn));
  form.addEventListener('submit', async ev => {
    ev.preventDefault();
    submitBtn.disabled = true;
    errSlot.replaceChildren();
    try {
      await onSubmit(key);
      dlg.close();
    } catch (e) {
      errSlot.replaceChildren(errorBox(e));
    } finally {
      submitBtn.disabled = false;
    }
  });
  dlg.append(form);
  dlg.addEventListener('keydown', ev => {
    if (ev.key === 'Escape') {
      ev.preventDefault();
      dlg.close();
    } else if (ev.key === 'Tab') {
      const f = [...dlg.querySelectorAll('button, input, textarea, select, a[href], [tabindex]:not([tabindex="-1"])')]
        .filter(e => !e.disabled && e.getClientRects().length);
      if (!f.length) return;
      const first = f[0];
      const lastEl = f[f.length - 1];
      if (ev.shiftKey && (document.activeElement === first || !dlg.contains(document.activeElement))) {
        ev.preventDefault();
        lastEl.focus();
      } else if (!ev.shiftKey && document.activeElement === lastEl) {
        ev.preventDefault();
        first.focus();
      }
    }
  });
  dlg.addEventListener('close', () => {
    dlg.remove();
    if (opener && opener.isConnected && typeof opener.focus === 'function') opener.focus();
  });
  document.body.append(dlg);
  dlg.showModal();
  const firstField = dlg.querySelector('input, textarea, select');
  (firstField || submitBtn).focus();
}

function idempotencyKey() {
  const b = new Uint8Array(16);
  crypto.getRandomValues(b);
  return 'ui-' + Array.from(b, x => x.toString(16).padStart(2, '0')).join('');
}

// ---------------------------------------------------------------- engine

function engineView(ctx) {
  const box = h('div', { id: 'engine' });
  const updated = h('p', { class: 'muted updated', id: 'engine-updated' });
  ctx.show(titleRow('Engine', updated), box);

  function stat(label, value, id) {
    return h('div', { class: 'stat' }, h('dt', {}, label), h('dd', { id, 'data-known': value !== DASH }, value));
  }

  function feedLag(feed) {
    if (!feed || typeof feed !== 'object') return DASH;
    if (typeof feed.lagMs === 'number') return duration(feed.lagMs);
    if (typeof feed.lagSeconds === 'number') return duration(feed.lagSeconds * 1000);
    if (typeof feed.lag === 'number') return duration(feed.lag * 1000);
    if (typeof feed.lag === 'string') return feed.lag;
    return DASH;
  }

  function leaseCount(v) {
    if (Array.isArray(v)) return String(v.length);
    return show(v);
  }

  // flat shows a figure: a number, or an object's fields in one line.
  function flat(v) {
    if (v && typeof v === 'object' && !Array.isArray(v)) return Object.entries(v).map(([k, x]) => k + ' ' + show(x)).join(' · ') || DASH;
    return typeof v === 'number' ? num(v, 2) : show(v);
  }

  function replicaState(r) {
    const s = typeof r.state === 'string' && r.state ? r.state : (r.live === true ? 'live' : r.live === false ? 'not live' : '');
    if (!s) return DASH;
    const cls = r.live === false || s === 'expired' ? 'state-failed' : s === 'leaving' ? 'state-cancelled' : 'state-completed';
    const icon = cls === 'state-completed' ? '●' : cls === 'state-failed' ? '✕' : '↘';
    return h('span', { class: 'badge ' + cls }, h('span', { class: 'icon', 'aria-hidden': 'true' }, icon), s);
  }

  const FEED_LABELS = {
    pendingChanges: 'Pending changes', lagSeconds: 'Lag', heads: 'Heads (messages seen, not yet fetched)',
    dueWakeups: 'Wakeups due', laterWakeups: 'Wakeups later', intentsDelivered: 'Intents delivered by the feed',
    intentsSwept: 'Intents delivered by the sweep', catchups: 'Catch-up queries',
  };

  function render(d) {
    const req = d.requests && typeof d.requests === 'object' ? d.requests : {};
    const wake = d.wakeLatencyMs && typeof d.wakeLatencyMs === 'object' ? d.wakeLatencyMs : {};
    const replicas = (Array.isArray(d.replicas) ? d.replicas : []).filter(r => r && typeof r === 'object');
    const leases = (Array.isArray(d.leases) ? d.leases : []).filter(l => l && typeof l === 'object');
    const feed = d.feed && typeof d.feed === 'object' ? d.feed : null;
    const self = replicas.find(r => r.self);
    const owners = new Set(leases.map(l => l.owner).filter(Boolean));
    return [
      h('dl', { class: 'stats card' },
        stat('Mode', show(d.mode), 'engine-mode'),
        stat('This replica', show(d.replica || (self && self.id)), 'engine-replica'),
        stat('Feed lag', feedLag(feed), 'engine-feed-lag'),
        stat('Wake latency p50', typeof wake.p50 === 'number' ? duration(wake.p50) : DASH, 'engine-wake-p50'),
        stat('Wake latency p99', typeof wake.p99 === 'number' ? duration(wake.p99) : DASH, 'engine-wake-p99'),
        stat('RU / min', num(req.ruPerMin), 'engine-ru'),
        stat('429 / min', num(req.throttledPerMin), 'engine-429'),
        stat('Requests / min', num(req.requestsPerMin), 'engine-requests')),
      typeof req.windowSeconds === 'number' && req.windowSeconds > 0 && req.windowSeconds < 59
        ? h('p', { class: 'hint' }, 'Rates are per minute, measured over the last ' + Math.round(req.windowSeconds) + ' s (the service has run less than a minute).') : null,
      d.note ? h('p', { class: 'hint', id: 'engine-note' }, String(d.note)) : null,
      h('section', { class: 'card', 'aria-labelledby': 'replicas-title' }, h('h2', { id: 'replicas-title' }, 'Replicas (' + replicas.length + ')'),
        h('div', { class: 'table-wrap' }, table({ id: 'replicas-table' }, ['Replica', 'Host', 'State', 'Heartbeat', 'Leases'], replicas.map(r => ({
          props: r.self ? { class: 'self' } : {},
          cells: [h('span', {}, h('code', {}, show(r.id)), r.self ? h('span', { class: 'tag' }, 'this replica') : null), show(r.host),
            replicaState(r), timeEl(r.lastHeartbeat), leaseCount(r.leases)],
        })), d.mode === 'polling' ? 'Polling mode keeps no heartbeats.' : 'No replicas reported.'))),
      h('section', { class: 'card', 'aria-labelledby': 'leases-title' }, h('h2', { id: 'leases-title' }, 'Leases (' + leases.length + ')'),
        h('div', { class: 'table-wrap' }, table({ id: 'leases-table' }, ['Slots', 'Owner', 'Since', 'Epoch'], leases.map(l => ({
          props: self && owners.size > 1 && l.owner === self.id ? { class: 'self' } : {},
          cells: [h('code', {}, show(l.range)), l.owner ? h('code', {}, l.owner) : h('span', { class: 'muted' }, 'free'), timeEl(l.since), show(l.epoch)],
        })), d.mode === 'polling' ? 'Polling mode holds no leases.' : 'No leases reported.'))),
      h('section', { class: 'card', 'aria-labelledby': 'feed-title' }, h('h2', { id: 'feed-title' }, 'Change feed'),
        feed && Object.keys(feed).length
          ? h('dl', { class: 'facts', id: 'engine-feed' }, Object.entries(feed).map(([k, v]) => h('div', {}, h('dt', {}, FEED_LABELS[k] || k),
            h('dd', {}, k === 'lagSeconds' && typeof v === 'number' ? duration(v * 1000) : flat(v)))))
          : h('p', { class: 'muted', id: 'engine-feed' }, DASH)),
    ];
  }

  let shown = '';
  async function load() {
    try {
      const { data } = await api('GET', 'v1/engine');
      if (!ctx.alive()) return;
      const d = data && typeof data === 'object' ? data : {};
      const key = JSON.stringify({ ...d, observedAt: undefined });
      if (key !== shown) {
        shown = key;
        swap(box, render(d));
      } else {
        refreshTimes(box);
      }
      updated.replaceChildren('Observed ', timeEl(data && data.observedAt ? data.observedAt : new Date().toISOString()), ' · every 2 s');
    } catch (e) {
      if (!ctx.alive() || e.status === 401) return;
      shown = '';
      swap(box, [errorBox(e, e.status === 404 || e.status === 501 ? 'This service does not report its engine.' : 'The engine could not be read.')]);
    }
    ctx.ready();
  }
  const poll = poller(load, ENGINE_REFRESH_MS);
  poll.start();
  return { stop: poll.stop };
}
engineView.viewName = 'engine';

// ---------------------------------------------------------------- start

document.getElementById('skip').addEventListener('click', () => {
  const target = $main.querySelector('h1') || $main;
  target.focus();
});
window.addEventListener('hashchange', () => route());

(async () => {
  takeFragmentToken();
  if (await loadMe()) route({ focus: false });
})();
