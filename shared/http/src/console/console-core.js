// The console's shared helpers: the admin API call, the token and who it names, writing values as
// text (never as HTML), times for a person, status badges, confirmations and the outcome line next
// to a control. Loaded first; console-explain.js, console-queues.js and console.js use these names.
'use strict';

const $ = (id) => document.getElementById(id);
const TOKEN_KEY = 'clinic.console.token';

function token() { return sessionStorage.getItem(TOKEN_KEY) || ''; }

// The token's payload (sub, role, exp, workspace), decoded here for the header only: the server
// checks the signature; nothing here trusts it.
function claims() {
  const part = token().split('.')[1];
  if (!part) return null;
  try {
    const json = atob(part.replace(/-/g, '+').replace(/_/g, '/').padEnd(Math.ceil(part.length / 4) * 4, '='));
    return JSON.parse(json);
  } catch (_) {
    return null;
  }
}

// Raised for a 401: the page asks for a new token.
class Unauthorized extends Error {}

async function api(method, path, body) {
  const sent = token();
  const headers = { Authorization: 'Bearer ' + sent };
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  const response = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  const answer = await response.json().catch(() => ({}));
  // Forgotten (or replaced) while the request was out: its answer is shown nowhere.
  if (token() !== sent) throw new Error('the token changed while this request was out; nothing shown');
  if (response.status === 401) {
    onUnauthorized();
    throw new Unauthorized('401: the token was refused (expired or not valid). Paste a new one above.');
  }
  if (!response.ok) {
    const field = answer.field ? ' (' + answer.field + ')' : '';
    throw new Error(response.status + ' ' + (answer.title || 'error') + field + (answer.detail ? ': ' + answer.detail : ''));
  }
  return answer;
}

// Set by console.js: what a 401 does to the page.
let onUnauthorized = () => {};
function setOnUnauthorized(handler) { onUnauthorized = handler; }

function el(tag, text, className) {
  const node = document.createElement(tag);
  if (text !== undefined && text !== null) node.textContent = String(text);
  if (className) node.className = className;
  return node;
}

function cell(row, value, className) {
  const td = document.createElement('td');
  if (value instanceof Node) td.appendChild(value); else td.textContent = value == null ? '' : String(value);
  if (className) td.className = className;
  row.appendChild(td);
  return td;
}

function button(label, onClick, id, title) {
  const b = el('button', label);
  b.type = 'button';
  if (id) b.id = id;
  if (title) b.title = title;
  b.addEventListener('click', onClick);
  return b;
}

function fill(tbody, items, render, emptyText) {
  tbody.replaceChildren();
  for (const item of items) {
    const tr = document.createElement('tr');
    render(tr, item);
    tbody.appendChild(tr);
  }
  if (items.length === 0 && emptyText) {
    const tr = document.createElement('tr');
    const td = cell(tr, emptyText, 'empty');
    td.colSpan = tbody.parentElement.tHead ? tbody.parentElement.tHead.rows[0].cells.length : 1;
    tbody.appendChild(tr);
  }
}

// "40 s", "3 min", "2 h 5 min", "4 d 2 h" for a duration in milliseconds.
function duration(ms) {
  const s = Math.max(0, Math.round(ms / 1000));
  if (s < 60) return s + ' s';
  const m = Math.floor(s / 60);
  if (m < 60) return m + ' min';
  const h = Math.floor(m / 60);
  if (h < 48) return h + ' h' + (m % 60 ? ' ' + (m % 60) + ' min' : '');
  return Math.floor(h / 24) + ' d' + (h % 24 ? ' ' + (h % 24) + ' h' : '');
}

// A relative time ("3 min ago", "in 40 s") for an RFC 3339 time.
function relative(iso) {
  if (!iso) return '';
  const delta = new Date(iso).getTime() - Date.now();
  if (Math.abs(delta) < 1000) return 'now';
  return delta < 0 ? duration(-delta) + ' ago' : 'in ' + duration(delta);
}

// Local time and UTC, to the second (no microseconds), for the hover text.
function exact(iso) {
  const at = new Date(iso);
  if (Number.isNaN(at.getTime())) return '';
  return at.toLocaleString() + ' (local) · ' + at.toISOString().replace(/\.\d+Z$/, 'Z') + ' (UTC)';
}

// A <time> element: the relative age, the exact times on hover.
function when(iso) {
  if (!iso) return el('span', '—');
  const t = el('time', relative(iso));
  t.dateTime = iso;
  t.title = exact(iso);
  return t;
}

const ATTENTION = new Set(['dead', 'failed', 'error', 'paused', 'off', 'no_contact', 'uncertain', 'stuck']);
const WAITING = new Set(['retry', 'pending', 'claimed', 'sending', 'held', 'deferred', 'awaiting_receipt', 'not_started']);

// A status as text and colour: dead, failed, error, paused in red with a mark; live ones in amber.
function badge(status) {
  const s = String(status == null ? '' : status);
  const span = el('span', (ATTENTION.has(s) ? '✖ ' : '') + s, 'badge');
  if (ATTENTION.has(s)) span.classList.add('bad');
  else if (WAITING.has(s)) span.classList.add('wait');
  else span.classList.add('ok');
  span.dataset.status = s;
  return span;
}

// Error codes in words (the code stays beside it). Unknown codes show as they are.
const CODE_WORDS = {
  attempts_exhausted: 'every attempt failed; the attempt ceiling was reached',
  provider_rejected: 'the provider refused the message',
  listener_paused: 'held: a listener it goes to is paused',
  lease_expired: 'the dispatcher holding it stopped answering; another took it over',
  transport_unavailable: 'the message broker could not be reached',
  breaker_open: 'held while the broker keeps failing (circuit breaker open)',
  unknown_listener: 'no listener of that name in this build',
  unknown_type: 'an event type this build does not know',
  ses_throttled: 'the email provider is throttling',
  connect_failed: 'the receiver could not be reached',
  timeout: 'the receiver did not answer in time',
  http_5xx: 'the receiver answered with a server error',
  http_4xx: 'the receiver refused the request',
};

function inWords(code) {
  if (!code) return '';
  return CODE_WORDS[code] ? CODE_WORDS[code] + ' (' + code + ')' : code;
}

// Shows `text` next to a control (its outcome line); errors in red. Returns the line.
function outcome(line, text, isError) {
  if (isError && !token()) return line; // after Forget the screen stays clear
  line.textContent = text;
  line.classList.toggle('error', Boolean(isError));
  delete line.dataset.watch; // a new outcome: what an earlier action's watch said no longer applies
  return line;
}

// Runs `action`, showing any error on `line` (next to the control that caused it).
function guarded(line, action) {
  return async (...args) => {
    try {
      await action(...args);
    } catch (error) {
      outcome(line, error.message, true);
    }
  };
}

// A destructive action asks first, naming what it touches and how many.
function confirmed(text) { return window.confirm(text); }

// Puts a form's named controls into an object (empty ones left out).
function formValues(form, names) {
  const values = {};
  for (const name of names) {
    const control = form.elements[name];
    const value = control ? control.value.trim() : '';
    if (value) values[name] = value;
  }
  return values;
}

// Watches the rows an action changed for a bounded time and says what became of them:
// "3 retried → 3 dispatched" or "→ 2 dead again: attempts_exhausted". `probe(ids)` answers a Map
// id → { status, code }; `settled` is the set of statuses where a row stops being watched.
const WATCH_MS = 30000;
const WATCH_EVERY_MS = 1000;

async function watch(line, verb, ids, total, probe, settled, changedLabel) {
  if (ids.length === 0) return;
  const started = Date.now();
  const head = line.textContent; // what the action answered stays; what became of it follows
  const of = total > ids.length ? ' (watching ' + ids.length + ' of ' + total + ')' : '';
  let states = new Map();
  for (;;) {
    try {
      states = await probe(ids);
    } catch (error) {
      if (error instanceof Unauthorized) throw error;
    }
    const done = ids.every((id) => states.has(id) && settled.has(states.get(id).status));
    const timedOut = Date.now() - started >= WATCH_MS;
    line.textContent = head + ' ' + total + ' ' + verb + ' → ' + summarize(ids, states, settled) + of +
      (done ? '' : timedOut ? ' (stopped watching after ' + duration(WATCH_MS) + ')' : ' …');
    line.dataset.watch = done ? 'settled' : timedOut ? 'timeout' : 'watching';
    line.classList.toggle('error', [...states.values()].some((s) => ATTENTION.has(s.status)));
    if (done || timedOut) break;
    await new Promise((resolve) => setTimeout(resolve, WATCH_EVERY_MS));
  }
  if (changedLabel) changedLabel();
}

// "2 dispatched, 1 dead again: attempts_exhausted, 1 pending".
function summarize(ids, states, settled) {
  const counts = new Map();
  for (const id of ids) {
    const state = states.get(id);
    const status = state ? state.status : 'not seen';
    const again = ATTENTION.has(status) ? ' again' : '';
    const key = status + again + (state && state.code && ATTENTION.has(status) ? ': ' + state.code : '') +
      (state && state.code === 'listener_paused' && !settled.has(status) ? ' (held: listener paused)' : '');
    counts.set(key, (counts.get(key) || 0) + 1);
  }
  return [...counts.entries()].map(([key, n]) => n + ' ' + key).join(', ');
}
