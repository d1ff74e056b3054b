// The explain view: one event as a story — a summary first (status, attempt n of N, the last error
// in words, the next attempt, each listener and delivery), then its life as a timeline of rows, then
// every section's rows for the curious. Actions act on the event on screen (`explained`), never on
// whatever is typed into the id box; a new or failed explain clears the old one first.
'use strict';

let explained = null; // { eventId, publishedName, status } of the explanation on screen
let maxAttempts = null; // the outbox's attempt ceiling (from the overview)
let explainSeq = 0; // only the newest explain request may render (an older answer arriving late is dropped)

function sectionRows(answer, name) {
  const found = answer.sections.find((s) => s.name === name);
  return found ? found.rows : [];
}

function clearExplanation() {
  explained = null;
  $('explain-body').replaceChildren();
  $('single-form').hidden = true;
  $('single-target').textContent = '';
  outcome($('single-result'), '');
  delete $('single-result').dataset.watch;
}

async function explain(eventId, keepResult) {
  const line = $('explain-result');
  const seq = ++explainSeq;
  outcome(line, '');
  if (!keepResult) clearExplanation();
  let answer;
  try {
    answer = await api('GET', '/v1/system/events/' + encodeURIComponent(eventId));
  } catch (error) {
    if (seq !== explainSeq) return;
    clearExplanation();
    outcome(line, 'Explain ' + eventId + ' failed: ' + error.message, true);
    return;
  }
  if (seq !== explainSeq) return;
  renderExplanation(answer);
  if (!keepResult) $('explain-title').scrollIntoView();
}

function dt(list, label, value, id) {
  const term = el('dt', label);
  const detail = el('dd');
  if (value instanceof Node) detail.appendChild(value); else detail.textContent = value == null ? '' : String(value);
  if (id) detail.id = id;
  list.append(term, detail);
  return detail;
}

function joined(parts) {
  const span = el('span');
  parts.forEach((part, i) => {
    if (i) span.append(document.createTextNode(', '));
    span.append(part instanceof Node ? part : document.createTextNode(String(part)));
  });
  return span;
}

function renderExplanation(answer) {
  const body = $('explain-body');
  body.replaceChildren();
  const outbox = sectionRows(answer, 'outbox')[0] || {};
  explained = { eventId: answer.eventId, publishedName: answer.publishedName, status: outbox.status };

  const title = el('p', 'Event ' + answer.eventId + ' — ' + answer.publishedName, 'code');
  title.id = 'explain-published';
  body.appendChild(title);

  // The summary.
  const summary = el('dl');
  summary.id = 'explain-summary';
  const held = outbox.status === 'retry' && outbox.lastErrorCode === 'listener_paused';
  dt(summary, 'Status', joined([badge(outbox.status || 'no outbox row')].concat(held ? ['held: a listener is paused'] : [])), 'explain-status');
  dt(summary, 'Attempt', outbox.attempts == null ? '—' :
    'attempt ' + outbox.attempts + (maxAttempts ? ' of ' + maxAttempts : ''), 'explain-attempt');
  dt(summary, 'Last error', outbox.lastErrorCode ? inWords(outbox.lastErrorCode) : 'none', 'explain-error');
  if (outbox.status === 'pending' || outbox.status === 'retry') {
    const due = new Date(outbox.availableAt).getTime() <= Date.now();
    dt(summary, 'Next attempt', due ? 'due now' : when(outbox.availableAt), 'explain-next');
  }
  const listeners = sectionRows(answer, 'listeners');
  const words = { applied: 'applied', rejected: 'rejected', awaiting_receipt: 'started, waiting for its receipt', not_started: 'not started' };
  dt(summary, 'Listeners', listeners.length === 0 ? 'none routed' : joined(listeners.map((l) => {
    const span = el('span');
    span.append(el('span', l.listener + ': ', 'code'), badge(l.paused ? 'paused' : l.outcome),
      document.createTextNode(' ' + (words[l.outcome] || l.outcome) + (l.rejectedReason ? ' (' + l.rejectedReason + ')' : '')));
    return span;
  })), 'explain-listeners');
  const deliveries = sectionRows(answer, 'deliveries');
  dt(summary, 'Notifications', deliveries.length === 0 ? 'none' : joined(deliveries.map((d) => {
    const span = el('span');
    span.append(el('span', d.template + ' (' + d.channel + '): ', 'code'), badge(d.status),
      document.createTextNode(d.lastErrorCode ? ' ' + inWords(d.lastErrorCode) : ''));
    return span;
  })), 'explain-deliveries');
  const hooks = sectionRows(answer, 'webhook deliveries');
  dt(summary, 'Webhook deliveries', hooks.length === 0 ? 'none' : joined(hooks.map((w) => {
    const span = el('span');
    span.append(el('span', 'endpoint ' + w.endpointId + ' #' + w.sequence + ': ', 'code'), badge(w.status),
      document.createTextNode(w.lastErrorCode ? ' ' + inWords(w.lastErrorCode) : ''));
    return span;
  })), 'explain-webhooks');
  const unsettled = sectionRows(answer, 'custody').filter((c) => !c.settledAt);
  dt(summary, 'Custody', unsettled.length === 0 ? 'every start settled' :
    unsettled.length + ' start(s) without a receipt: ' + unsettled.map((c) => c.listener + (c.stuckAt ? ' (handed to operators)' : '')).join(', '));
  const trace = dt(summary, 'Trace', answer.traceId ? 'Trace ' + answer.traceId : 'No trace stored');
  trace.id = 'explain-trace';
  trace.classList.add('code');
  body.appendChild(summary);

  // The timeline.
  body.appendChild(el('h3', 'Timeline'));
  const table = el('table');
  table.id = 'explain-timeline';
  const head = table.createTHead().insertRow();
  for (const name of ['When', 'What', 'Status', 'Detail']) { const th = el('th', name); th.scope = 'col'; head.appendChild(th); }
  const tbody = table.createTBody();
  for (const step of timeline(answer, outbox)) {
    const tr = tbody.insertRow();
    cell(tr, when(step.at));
    cell(tr, step.what);
    cell(tr, step.status ? badge(step.status) : '');
    cell(tr, step.detail || '', 'code');
  }
  body.appendChild(wrap(table));

  // Every section's rows, for the curious (wrapped cells; nested values as short text).
  const details = el('details');
  details.appendChild(el('summary', 'Every section (' + answer.sections.length + ')'));
  for (const section of answer.sections) {
    const part = el('section');
    part.dataset.section = section.name;
    part.appendChild(el('h4', section.name + ' (' + section.source + ')'));
    if (section.note) part.appendChild(el('p', 'Note: ' + section.note));
    if (section.rows.length === 0) {
      part.appendChild(el('p', 'none'));
    } else {
      const keys = [...new Set(section.rows.flatMap((row) => Object.keys(row)))];
      const raw = el('table', undefined, 'raw');
      const h = raw.createTHead().insertRow();
      for (const key of keys) { const th = el('th', key); th.scope = 'col'; h.appendChild(th); }
      const rb = raw.createTBody();
      for (const row of section.rows) {
        const tr = rb.insertRow();
        for (const key of keys) cell(tr, short(key, row[key]));
      }
      part.appendChild(wrap(raw));
    }
    details.appendChild(part);
  }
  body.appendChild(details);

  $('single-form').hidden = false;
  $('single-target').textContent = 'Acting on event ' + answer.eventId + ' (' + answer.publishedName + ', ' + (outbox.status || 'no outbox row') + ')';
  $('single-form').dataset.eventId = answer.eventId;
}

// A value of a raw row as short text: times to the second, lists joined, the history counted.
function short(key, value) {
  if (value === null || value === undefined) return '';
  if (key === 'history' && Array.isArray(value)) return value.length + ' entries (see the timeline)';
  if (Array.isArray(value)) return value.map((v) => (typeof v === 'object' ? JSON.stringify(v) : String(v))).join(', ');
  if (typeof value === 'object') return JSON.stringify(value);
  if (typeof value === 'string' && /^\d{4}-\d\d-\d\dT/.test(value)) return value.replace(/\.\d+/, '');
  return String(value);
}

function wrap(table) {
  const div = el('div', undefined, 'scroll');
  div.appendChild(table);
  return div;
}

// The event's life, oldest first: the outbox history, starts and receipts, notifications, webhook
// deliveries, rejections and operator actions.
function timeline(answer, outbox) {
  const steps = [];
  const add = (at, what, status, detail) => { if (at) steps.push({ at, what, status, detail }); };
  for (const h of outbox.history || []) {
    const change = h.statusBefore ? h.statusBefore + ' → ' + h.status : h.status;
    add(h.at, (h.kind ? h.kind : 'outbox') + (h.by ? ' by ' + h.by : ''), h.status,
      [change, h.attempt != null ? 'attempt ' + h.attempt : '', h.errorCode ? inWords(h.errorCode) : '',
        h.claimedBy ? 'claimed by ' + h.claimedBy : ''].filter(Boolean).join(' · '));
  }
  for (const l of sectionRows(answer, 'listeners')) {
    add(l.startedAt, 'started ' + l.listener, null, l.transportMessageId ? 'message ' + l.transportMessageId : '');
    add(l.receivedAt, 'receipt of ' + l.listener, l.outcome, l.rejectedReason || '');
  }
  for (const c of sectionRows(answer, 'custody')) {
    add(c.restartedAt, 'custody restarted ' + c.listener, null, 'restarts ' + c.restarts);
    add(c.stuckAt, 'custody handed to operators: ' + c.listener, 'stuck', '');
  }
  for (const r of sectionRows(answer, 'rejections')) {
    add(r.rejectedAt || r.at || r.createdAt, 'rejected by ' + r.listener, 'rejected', r.reason || '');
  }
  for (const d of sectionRows(answer, 'deliveries')) {
    add(d.createdAt, 'notification ' + d.template + ' (' + d.channel + ')', d.status,
      [d.id, 'attempts ' + d.attempts, d.lastErrorCode ? inWords(d.lastErrorCode) : ''].filter(Boolean).join(' · '));
    add(d.sentAt, 'notification sent', 'sent', d.id);
  }
  for (const w of sectionRows(answer, 'webhook deliveries')) {
    add(w.createdAt, 'webhook #' + w.sequence + ' to ' + w.endpointId, w.status,
      [w.id, 'attempts ' + w.attempts, w.lastStatus ? 'HTTP ' + w.lastStatus : '', w.lastErrorCode ? inWords(w.lastErrorCode) : ''].filter(Boolean).join(' · '));
    add(w.deliveredAt, 'webhook delivered', 'delivered', w.id);
  }
  for (const a of sectionRows(answer, 'actions')) {
    add(a.createdAt, 'operator ' + a.action + ' by ' + a.actor, a.statusAfter,
      [a.statusBefore + ' → ' + a.statusAfter, a.listeners ? 'listeners ' + a.listeners.join(', ') : '',
        a.batchId ? 'batch ' + a.batchId : '', a.notificationId ? 'notification ' + a.notificationId : '',
        a.webhookDeliveryId ? 'webhook delivery ' + a.webhookDeliveryId : ''].filter(Boolean).join(' · '));
  }
  return steps.sort((a, b) => new Date(a.at) - new Date(b.at));
}

// The one probe of outbox rows: each id's status and code, read from its explanation.
async function probeOutbox(ids) {
  const states = new Map();
  await Promise.all(ids.map(async (id) => {
    const answer = await api('GET', '/v1/system/events/' + encodeURIComponent(id));
    const row = sectionRows(answer, 'outbox')[0];
    if (row) states.set(id, { status: row.status, code: row.lastErrorCode });
  }));
  return states;
}

const OUTBOX_SETTLED = new Set(['dispatched', 'dead', 'discarded']);

// Acts on the event on screen (its id carried by the explanation, not the input box).
async function single() {
  const line = $('single-result');
  if (!explained) throw new Error('explain an event first');
  const eventId = explained.eventId;
  const action = $('single-action').value;
  const reasonBox = $('single-reason');
  const body = { reason: reasonBox.value };
  const listeners = $('single-listeners').value.split(',').map((s) => s.trim()).filter(Boolean);
  if (action === 'replay' && listeners.length) body.listeners = listeners;
  if (action === 'discard' && !confirmed('Discard event ' + eventId + ' (' + explained.publishedName + ', 1 outbox row)? It will not be dispatched again.')) {
    outcome(line, 'Discard cancelled.');
    return;
  }
  const record = await api('POST', '/v1/system/outbox/' + encodeURIComponent(eventId) + '/' + action, body);
  reasonBox.value = '';
  $('single-listeners').value = '';
  line.dataset.eventId = eventId;
  outcome(line, action + ' ' + eventId + ': ' + record.statusBefore + ' → ' + record.statusAfter);
  await explain(eventId, true);
  refreshAll();
  const verb = { retry: 'retried', replay: 'replayed', discard: 'discarded' }[action];
  await watch(line, verb + ' (' + eventId + ')', [eventId], 1, probeOutbox, OUTBOX_SETTLED, () => {
    if (explained && explained.eventId === eventId) explain(eventId, true);
    refreshAll();
  });
}
