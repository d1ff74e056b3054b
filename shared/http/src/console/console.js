// The clinic outbox console. Every value from the API is written with textContent (never as HTML),
// the token lives in sessionStorage only, and every call goes to the same origin's admin API.
'use strict';

const $ = (id) => document.getElementById(id);
const TOKEN_KEY = 'clinic.console.token';
let cursor = null;
let dryRunKey = null;

function token() { return sessionStorage.getItem(TOKEN_KEY) || ''; }

function say(text, isError) {
  const status = $('status');
  status.textContent = text;
  status.className = isError ? 'error' : '';
}

async function api(method, path, body) {
  const headers = { Authorization: 'Bearer ' + token() };
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  const response = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  const answer = await response.json().catch(() => ({}));
  if (!response.ok) {
    const field = answer.field ? ' (' + answer.field + ')' : '';
    throw new Error(response.status + ' ' + (answer.title || 'error') + field + (answer.detail ? ': ' + answer.detail : ''));
  }
  return answer;
}

function cell(row, value) {
  const td = document.createElement('td');
  if (value instanceof Node) td.appendChild(value); else td.textContent = value == null ? '' : String(value);
  row.appendChild(td);
  return td;
}

function button(label, onClick, id) {
  const b = document.createElement('button');
  b.type = 'button';
  b.textContent = label;
  if (id) b.id = id;
  b.addEventListener('click', onClick);
  return b;
}

function fill(tbody, items, render) {
  tbody.replaceChildren();
  for (const item of items) {
    const tr = document.createElement('tr');
    render(tr, item);
    tbody.appendChild(tr);
  }
}

async function loadOverview() {
  const o = await api('GET', '/v1/system/overview');
  fill($('by-status').tBodies[0], Object.entries(o.byStatus), (tr, [status, n]) => {
    tr.dataset.status = status;
    cell(tr, status); cell(tr, n);
  });
  const ages = $('ages');
  ages.replaceChildren();
  for (const [label, value, id] of [
    ['Oldest due row waiting (ms)', o.oldestPendingAgeMs, 'age-pending'],
    ['Oldest live row age (ms)', o.oldestLiveAgeMs, 'age-live'],
    ['Oldest unsettled event age, all workspaces (ms)', o.oldestUnsettledAgeMs, 'age-unsettled'],
  ]) {
    const dt = document.createElement('dt'); dt.textContent = label;
    const dd = document.createElement('dd'); dd.textContent = String(value); dd.id = id;
    ages.append(dt, dd);
  }
  fill($('dead-codes').tBodies[0], Object.entries(o.deadByErrorCode), (tr, [code, n]) => {
    cell(tr, code).className = 'code'; cell(tr, n);
    cell(tr, button('Show dead rows with ' + code, () => {
      $('f-status').value = 'dead';
      $('f-errorCode').value = code === 'none' ? '' : code;
      loadRows(false).catch(fail);
      $('outbox-title').scrollIntoView();
    }, 'show-dead-' + code));
  });
  fill($('paused').tBodies[0], o.pausedListeners, (tr, p) => { cell(tr, p.listener); cell(tr, p.held); cell(tr, p.pausedBy); });
  say('Overview loaded.');
}

function filterValues() {
  const filter = {};
  for (const name of ['status', 'eventType', 'listener', 'errorCode', 'from', 'to', 'resourceId']) {
    const value = $('f-' + name).value.trim();
    if (value) filter[name] = value;
  }
  return filter;
}

async function loadRows(more) {
  const params = new URLSearchParams(filterValues());
  params.set('limit', '50');
  if (more && cursor) params.set('cursor', cursor);
  const page = await api('GET', '/v1/system/outbox?' + params.toString());
  const tbody = $('rows').tBodies[0];
  if (!more) tbody.replaceChildren();
  for (const item of page.items) {
    const tr = document.createElement('tr');
    cell(tr, button(item.eventId, () => explain(item.eventId).catch(fail))).className = 'code';
    cell(tr, item.type); cell(tr, item.status); cell(tr, item.attempts);
    cell(tr, item.lastErrorCode).className = 'code'; cell(tr, item.createdAt);
    tbody.appendChild(tr);
  }
  cursor = page.nextCursor;
  $('rows-more').hidden = !cursor;
  dryRunKey = null;
  $('bulk-apply').disabled = true;
  say(tbody.rows.length + ' rows shown.');
}

function bulkBody(dryRun) {
  const body = { reason: $('bulk-reason').value, dryRun, filter: filterValues() };
  const listeners = $('bulk-listeners').value.split(',').map((s) => s.trim()).filter(Boolean);
  if (listeners.length) body.listeners = listeners;
  return body;
}

async function bulk(dryRun) {
  const action = $('bulk-action').value;
  const body = bulkBody(dryRun);
  const key = action + JSON.stringify(bulkBody(true));
  if (!dryRun && key !== dryRunKey) throw new Error('run the dry run again: the filter or action changed');
  const answer = await api('POST', '/v1/system/outbox/bulk/' + action, body);
  const result = $('bulk-result');
  if (dryRun) {
    const done = { retry: 'retried', replay: 'replayed', discard: 'discarded' }[action];
    result.textContent = 'Dry run: ' + answer.matched + ' rows would be ' + done + '. Sample: ' + answer.sample.join(', ');
    result.dataset.matched = String(answer.matched);
    dryRunKey = answer.matched > 0 ? key : null;
    $('bulk-apply').disabled = answer.matched === 0;
  } else {
    result.textContent = 'Applied: ' + answer.applied + ' rows, skipped ' + answer.skipped.length + ', remaining ' +
      answer.remaining + ', batch ' + answer.batchId + '.';
    result.dataset.applied = String(answer.applied);
    result.dataset.batch = answer.batchId || '';
    dryRunKey = null;
    $('bulk-apply').disabled = true;
    await loadOverview();
  }
}

function renderValue(value) {
  if (value === null || value === undefined) return '';
  if (typeof value === 'object') return JSON.stringify(value);
  return String(value);
}

async function explain(eventId) {
  $('explain-id').value = eventId;
  const answer = await api('GET', '/v1/system/events/' + encodeURIComponent(eventId));
  const body = $('explain-body');
  body.replaceChildren();
  const title = document.createElement('p');
  title.textContent = 'Event ' + answer.eventId + ' — ' + answer.publishedName;
  title.id = 'explain-published';
  body.appendChild(title);
  const trace = document.createElement('p');
  trace.id = 'explain-trace';
  trace.textContent = answer.traceId ? 'Trace ' + answer.traceId : 'No trace stored';
  body.appendChild(trace);
  for (const section of answer.sections) {
    const wrap = document.createElement('section');
    wrap.dataset.section = section.name;
    const h = document.createElement('h3');
    h.textContent = section.name + ' (' + section.source + ')';
    wrap.appendChild(h);
    if (section.note) { const p = document.createElement('p'); p.textContent = 'Note: ' + section.note; wrap.appendChild(p); }
    if (section.rows.length === 0) {
      const p = document.createElement('p'); p.textContent = 'none'; wrap.appendChild(p);
    } else {
      const keys = [...new Set(section.rows.flatMap((row) => Object.keys(row)))];
      const table = document.createElement('table');
      const head = table.createTHead().insertRow();
      for (const key of keys) { const th = document.createElement('th'); th.scope = 'col'; th.textContent = key; head.appendChild(th); }
      const tbody = table.createTBody();
      for (const row of section.rows) {
        const tr = tbody.insertRow();
        for (const key of keys) cell(tr, renderValue(row[key]));
      }
      wrap.appendChild(table);
    }
    body.appendChild(wrap);
  }
  $('single-form').hidden = false;
  $('explain-title').scrollIntoView();
  say('Explained ' + answer.eventId + '.');
}

async function single() {
  const eventId = $('explain-id').value.trim();
  const action = $('single-action').value;
  const record = await api('POST', '/v1/system/outbox/' + encodeURIComponent(eventId) + '/' + action, { reason: $('single-reason').value });
  $('single-result').textContent = action + ': ' + record.statusBefore + ' → ' + record.statusAfter + ' (action ' + record.id + ')';
  await explain(eventId);
}

async function loadListeners() {
  const answer = await api('GET', '/v1/system/listeners');
  fill($('listener-rows').tBodies[0], answer.items, (tr, l) => {
    cell(tr, l.listener).className = 'code';
    cell(tr, l.eventTypes.join(', '));
    cell(tr, l.paused ? 'paused' : 'running');
    cell(tr, l.held);
    cell(tr, button((l.paused ? 'Resume ' : 'Pause ') + l.listener, () => toggle(l).catch(fail), (l.paused ? 'resume-' : 'pause-') + l.listener));
  });
}

async function toggle(listener) {
  const reason = $('pause-reason').value;
  const verb = listener.paused ? 'resume' : 'pause';
  const record = await api('POST', '/v1/system/listeners/' + verb, { listener: listener.listener, reason });
  say(verb + ' ' + record.listener + (verb === 'resume' ? ': released ' + record.released + ' rows' : '') + '.');
  await Promise.all([loadListeners(), loadOverview()]);
}

function fail(error) { say(error.message, true); }

function submit(id, action) {
  $(id).addEventListener('submit', (event) => { event.preventDefault(); action().catch(fail); });
}

async function loadAll() {
  await loadOverview();
  await Promise.all([loadRows(false), loadListeners()]);
}

document.addEventListener('DOMContentLoaded', () => {
  submit('auth-form', async () => {
    sessionStorage.setItem(TOKEN_KEY, $('token').value.trim());
    $('token').value = '';
    await loadAll();
  });
  $('token-forget').addEventListener('click', () => { sessionStorage.removeItem(TOKEN_KEY); say('Token forgotten.'); });
  $('overview-refresh').addEventListener('click', () => loadOverview().catch(fail));
  submit('filter-form', () => loadRows(false));
  $('rows-more').addEventListener('click', () => loadRows(true).catch(fail));
  submit('bulk-form', () => bulk(true));
  $('bulk-apply').addEventListener('click', () => bulk(false).catch(fail));
  submit('explain-form', () => explain($('explain-id').value.trim()));
  submit('single-form', single);
  if (token()) loadAll().catch(fail); else say('Paste an admin bearer token to start.');
});
