// The queue views: outbox rows, notifications and webhook deliveries (each listed by its bulk
// filter, with single-row and bulk actions and a dry run, through the one set of operator routes),
// webhook endpoints (status and last number, recover since), unsettled custody and rejections.
// Every action shows what it changed next to its button and watches what became of those rows.
'use strict';

const ULID_CHARS = '0123456789ABCDEFGHJKMNPQRSTVWXYZ';

// The creation time (ms) a ULID carries in its first ten characters.
function ulidTime(id) {
  let ms = 0;
  for (const c of String(id).slice(0, 10).toUpperCase()) ms = ms * 32 + ULID_CHARS.indexOf(c);
  return ms;
}

// Reads the statuses of notification ids from their listing, around the ids' creation times (a
// notification id is a ULID: its first ten characters are its time).
async function probeDeliveries(ids) {
  const times = ids.map(ulidTime);
  const params = new URLSearchParams({
    from: new Date(Math.min(...times) - 60000).toISOString(),
    to: new Date(Math.max(...times) + 60000).toISOString(),
    limit: '100',
  });
  return statesOf(await api('GET', '/v1/system/deliveries?' + params.toString()), ids);
}

// Reads the statuses of webhook delivery ids from the newest deliveries (of one endpoint when known).
function probeWebhooks(endpointId) {
  return async (ids) => {
    const params = new URLSearchParams({ limit: '100' });
    if (endpointId) params.set('endpointId', endpointId);
    return statesOf(await api('GET', '/v1/webhooks/deliveries?' + params.toString()), ids);
  };
}

function statesOf(page, ids) {
  const states = new Map();
  for (const item of page.items) if (ids.includes(item.id)) states.set(item.id, { status: item.status, code: item.lastErrorCode });
  return states;
}

const QUEUES = {
  outbox: {
    noun: 'outbox row',
    list: '/v1/system/outbox',
    bulk: '/v1/system/outbox/bulk/',
    actions: ['retry', 'replay', 'discard'],
    idKey: 'eventId',
    filters: [
      ['status', ['pending', 'claimed', 'dispatched', 'retry', 'dead', 'discarded']], ['eventType'], ['listener'],
      ['errorCode'], ['olderThan', 'e.g. 15m'], ['from', 'RFC 3339'], ['to', 'RFC 3339'], ['resourceId']],
    columns: ['Event', 'Type', 'Status', 'Attempts', 'Error code', 'Created'],
    row: (tr, item) => {
      cell(tr, button(item.eventId, () => explain(item.eventId), undefined, 'Explain this event'), 'code');
      cell(tr, item.type); cell(tr, badge(item.status)); cell(tr, item.attempts);
      cell(tr, item.lastErrorCode, 'code'); cell(tr, when(item.createdAt));
    },
    probeFor: () => probeOutbox,
    settled: OUTBOX_SETTLED,
  },
  deliveries: {
    noun: 'notification',
    list: '/v1/system/deliveries',
    bulk: '/v1/system/deliveries/bulk/',
    single: '/v1/system/deliveries/',
    actions: ['retry', 'discard'],
    idKey: 'id',
    filters: [
      ['status', ['pending', 'sending', 'uncertain', 'sent', 'retry', 'dead', 'no_contact', 'opted_out', 'discarded', 'stale', 'deferred', 'suppressed']],
      ['listener'], ['template'], ['errorCode'], ['olderThan', 'e.g. 15m']],
    columns: ['Notification', 'Event', 'Listener', 'Template', 'Status', 'Attempts', 'Error code', 'Created', 'Act'],
    row: (tr, item, view) => {
      cell(tr, item.id, 'code');
      cell(tr, button(item.eventId, () => explain(item.eventId), undefined, 'Explain its event'), 'code');
      cell(tr, item.listener, 'code'); cell(tr, item.template + ' (' + item.channel + ')', 'code');
      cell(tr, badge(item.status)); cell(tr, item.attempts); cell(tr, inWords(item.lastErrorCode), 'code');
      cell(tr, when(item.createdAt)); cell(tr, rowActions(view, item));
    },
    probeFor: () => probeDeliveries,
    settled: new Set(['sent', 'dead', 'no_contact', 'opted_out', 'discarded', 'stale', 'suppressed']),
  },
  webhooks: {
    noun: 'webhook delivery',
    nouns: 'webhook deliveries',
    list: '/v1/webhooks/deliveries',
    bulk: '/v1/system/webhook-deliveries/bulk/',
    single: '/v1/system/webhook-deliveries/',
    actions: ['retry', 'discard'],
    idKey: 'id',
    filters: [
      ['status', ['pending', 'sending', 'delivered', 'retry', 'failed', 'discarded']], ['endpointId'], ['eventType'],
      ['errorCode'], ['olderThan', 'e.g. 15m']],
    columns: ['Delivery', 'Endpoint', 'No.', 'Event', 'Status', 'Attempts', 'Last answer', 'Next attempt', 'Created', 'Act'],
    row: (tr, item, view) => {
      cell(tr, item.id, 'code'); cell(tr, item.endpointId, 'code'); cell(tr, item.sequence);
      cell(tr, button(item.eventId, () => explain(item.eventId), undefined, 'Explain its event'), 'code');
      cell(tr, badge(item.status)); cell(tr, item.attempts);
      cell(tr, [item.lastStatus ? 'HTTP ' + item.lastStatus : '', inWords(item.lastErrorCode)].filter(Boolean).join(' · '), 'code');
      cell(tr, when(item.nextAttemptAt)); cell(tr, when(item.createdAt)); cell(tr, rowActions(view, item));
    },
    probeFor: (hint) => probeWebhooks(hint.endpointId),
    settled: new Set(['delivered', 'failed', 'discarded']),
  },
};

const VERBS = { retry: 'retried', replay: 'replayed', discard: 'discarded' };

// Builds a queue's filter form, list and bulk form inside its section (labelled controls only).
function buildQueue(name) {
  const q = QUEUES[name];
  const view = { name, q, cursor: null, dryRunKey: null };
  q.view = view;
  const section = $(name);
  const filter = el('form');
  filter.id = name + '-filter';
  const fields = el('fieldset');
  fields.appendChild(el('legend', 'Filter'));
  for (const [field, options] of q.filters) {
    const label = el('label', field);
    const control = Array.isArray(options) ? el('select') : el('input');
    if (Array.isArray(options)) {
      control.appendChild(new Option('any', ''));
      for (const option of options) control.appendChild(new Option(option, option));
    } else if (options) {
      control.placeholder = options;
    }
    control.name = field;
    control.id = name + '-f-' + field;
    label.htmlFor = control.id;
    label.appendChild(control);
    fields.appendChild(label);
  }
  const search = el('button', 'Search');
  search.type = 'submit';
  search.id = name + '-search';
  fields.appendChild(search);
  fields.appendChild(button('Clear filter', () => { filter.reset(); loadQueue(name).catch(fail(name)); }, name + '-clear'));
  filter.appendChild(fields);
  filter.addEventListener('submit', (event) => { event.preventDefault(); loadQueue(name).catch(fail(name)); });

  const table = el('table');
  table.id = name + '-rows';
  table.appendChild(el('caption', 'Matching ' + (q.nouns || q.noun + 's') + ', newest first'));
  const head = table.createTHead().insertRow();
  for (const column of q.columns) { const th = el('th', column); th.scope = 'col'; head.appendChild(th); }
  table.createTBody();
  const more = button('More', () => loadQueue(name, true).catch(fail(name)), name + '-more');
  more.hidden = true;
  const rowLine = el('p', undefined, 'result');
  rowLine.id = name + '-row-result';
  rowLine.setAttribute('role', 'status');
  rowLine.setAttribute('aria-live', 'polite');
  const listLine = el('p', undefined, 'result');
  listLine.id = name + '-list-result';

  const bulk = el('form');
  bulk.id = name + '-bulk';
  const set = el('fieldset');
  set.appendChild(el('legend', 'Act on every ' + q.noun + ' the filter above selects'));
  const action = el('select');
  action.id = name + '-bulk-action';
  for (const a of q.actions) action.appendChild(new Option(a, a));
  set.appendChild(labelled('Action', action));
  if (name === 'outbox') {
    const listeners = el('input');
    listeners.id = name + '-bulk-listeners';
    set.appendChild(labelled('Replay only listeners (comma-separated, optional)', listeners));
  }
  const reason = el('input');
  reason.id = name + '-reason';
  reason.required = true;
  set.appendChild(labelled('Reason (required; also for the row buttons)', reason));
  const dry = el('button', 'Dry run');
  dry.type = 'submit';
  dry.id = name + '-dry-run';
  set.appendChild(dry);
  const apply = button('Apply', () => bulkAct(name, false).catch(fail(name, 'bulk')), name + '-apply');
  apply.disabled = true;
  set.appendChild(apply);
  bulk.appendChild(set);
  const bulkLine = el('p', undefined, 'result');
  bulkLine.id = name + '-bulk-result';
  bulkLine.setAttribute('role', 'status');
  bulkLine.setAttribute('aria-live', 'polite');
  bulk.appendChild(bulkLine);
  bulk.addEventListener('submit', (event) => { event.preventDefault(); bulkAct(name, true).catch(fail(name, 'bulk')); });
  action.addEventListener('change', () => { view.dryRunKey = null; apply.disabled = true; });

  section.append(filter, listLine, wrap(table), more, rowLine, bulk);
}

function labelled(text, control) {
  const label = el('label', text);
  label.htmlFor = control.id;
  label.appendChild(control);
  return label;
}

// An error of a queue's control shown next to it: the bulk line or the list line.
function fail(name, where) {
  return (error) => outcome($(name + '-' + (where || 'list') + '-result'), error.message, true);
}

function queueFilter(name) {
  return formValues($(name + '-filter'), QUEUES[name].filters.map(([field]) => field));
}

async function loadQueue(name, more) {
  const view = QUEUES[name].view;
  const params = new URLSearchParams(queueFilter(name));
  params.set('limit', '50');
  if (more && view.cursor) params.set('cursor', view.cursor);
  const page = await api('GET', QUEUES[name].list + '?' + params.toString());
  const tbody = $(name + '-rows').tBodies[0];
  if (!more) tbody.replaceChildren();
  for (const item of page.items) {
    const tr = document.createElement('tr');
    tr.dataset.id = item[QUEUES[name].idKey];
    tr.dataset.status = item.status;
    QUEUES[name].row(tr, item, view);
    tbody.appendChild(tr);
  }
  if (tbody.rows.length === 0) fill(tbody, [], () => {}, 'No ' + QUEUES[name].noun + ' matches this filter.');
  view.cursor = page.nextCursor || null;
  $(name + '-more').hidden = !view.cursor;
  outcome($(name + '-list-result'), page.items.length + (more ? ' more' : '') + ' shown.');
}

// The Retry and Discard buttons of one notification or webhook delivery row.
function rowActions(view, item) {
  const span = el('span', undefined, 'actions');
  for (const action of view.q.actions) {
    span.appendChild(button(action, () => rowAct(view.name, item, action).catch(fail(view.name, 'row')),
      view.name + '-' + action + '-' + item.id, action + ' ' + view.q.noun + ' ' + item.id));
  }
  return span;
}

async function rowAct(name, item, action) {
  const q = QUEUES[name];
  const line = $(name + '-row-result');
  const reasonBox = $(name + '-reason');
  if (!reasonBox.value.trim()) throw new Error(action + ' ' + item.id + ': a reason is required (the Reason box below)');
  if (action === 'discard' && !confirmed('Discard ' + q.noun + ' ' + item.id + ' (1 row, now ' + item.status + ')? It will not be sent.')) {
    outcome(line, 'Discard cancelled.');
    return;
  }
  const record = await api('POST', q.single + encodeURIComponent(item.id) + '/' + action, { reason: reasonBox.value });
  reasonBox.value = '';
  line.dataset.id = item.id;
  outcome(line, action + ' ' + item.id + ': ' + record.statusBefore + ' → ' + record.statusAfter);
  refreshAll();
  await watch(line, VERBS[action] + ' (' + q.noun + ' ' + item.id + ')', [item.id], 1, q.probeFor(item), q.settled, refreshAll);
}

function bulkBody(name, dryRun) {
  const body = { reason: $(name + '-reason').value, dryRun, filter: queueFilter(name) };
  const box = $(name + '-bulk-listeners');
  const listeners = box ? box.value.split(',').map((s) => s.trim()).filter(Boolean) : [];
  if (listeners.length) body.listeners = listeners;
  return body;
}

function describe(filter) {
  const parts = Object.entries(filter).map(([k, v]) => k + '=' + v);
  return parts.length ? parts.join(', ') : 'no filter';
}

async function bulkAct(name, dryRun) {
  const q = QUEUES[name];
  const view = q.view;
  const line = $(name + '-bulk-result');
  const action = $(name + '-bulk-action').value;
  const body = bulkBody(name, dryRun);
  const key = action + JSON.stringify(bulkBody(name, true));
  if (!dryRun && key !== view.dryRunKey) throw new Error('Run the dry run again: the filter, action or reason changed.');
  if (!dryRun && !confirmed(action + ' ' + line.dataset.matched + ' ' + q.noun + '(s) matching ' + describe(body.filter) + '?')) {
    outcome(line, 'Cancelled: nothing was changed.');
    return;
  }
  const answer = await api('POST', q.bulk + action, body);
  if (dryRun) {
    outcome(line, 'Dry run: ' + answer.matched + ' ' + q.noun + '(s) matching ' + describe(body.filter) + ' would be ' +
      VERBS[action] + '.' + (answer.sample.length ? ' First: ' + answer.sample.slice(0, 5).join(', ') : ''));
    line.dataset.matched = String(answer.matched);
    delete line.dataset.applied;
    view.dryRunKey = answer.matched > 0 ? key : null;
    $(name + '-apply').disabled = answer.matched === 0;
    return;
  }
  $(name + '-reason').value = '';
  view.dryRunKey = null;
  $(name + '-apply').disabled = true;
  const skipped = answer.skipped.length ? ', skipped ' + answer.skipped.length + ' (' + answer.skipped.slice(0, 3).map((s) => s.id + ': ' + s.code).join('; ') + ')' : '';
  outcome(line, 'Applied: ' + answer.applied + ' ' + VERBS[action] + skipped + ', ' + answer.remaining + ' remaining, batch ' + answer.batchId + '.');
  line.dataset.applied = String(answer.applied);
  line.dataset.batch = answer.batchId || '';
  refreshAll();
  const watched = answer.sample.slice(0, 10);
  await watch(line, VERBS[action], watched, answer.applied, q.probeFor(body.filter), q.settled, refreshAll);
}

// Webhook endpoints: each one's status (active, error, off) and last delivery number, and the
// recover-since action (failed deliveries created since then are sent again, same webhook-id).
async function loadEndpoints() {
  const answer = await api('GET', '/v1/webhooks/endpoints');
  fill($('endpoint-rows').tBodies[0], answer.items, (tr, e) => {
    tr.dataset.id = e.id;
    tr.dataset.status = e.status;
    cell(tr, e.id, 'code'); cell(tr, badge(e.status)); cell(tr, e.lastSequence);
    cell(tr, e.failingSince ? when(e.failingSince) : 'no'); cell(tr, e.enabled ? 'yes' : 'no (' + (e.disabledReason || 'off') + ')');
    cell(tr, e.eventTypes.length ? e.eventTypes.join(', ') : 'every type', 'code');
    const acts = el('span', undefined, 'actions');
    acts.append(
      button('Show deliveries', () => {
        $('webhooks-filter').reset();
        $('webhooks-f-endpointId').value = e.id;
        loadQueue('webhooks').catch(fail('webhooks'));
        $('webhooks-title').scrollIntoView();
      }, 'show-endpoint-' + e.id),
      button('Recover since', () => recover(e).catch((error) => outcome($('endpoint-result'), error.message, true)), 'recover-' + e.id));
    cell(tr, acts);
  }, 'No webhook endpoint.');
}

async function recover(endpoint) {
  const line = $('endpoint-result');
  const hours = Number($('recover-since').value);
  const since = new Date(Date.now() - hours * 3600000).toISOString();
  const failed = await api('GET', '/v1/webhooks/deliveries?' + new URLSearchParams({ endpointId: endpoint.id, status: 'failed', from: since, limit: '100' }));
  if (!confirmed('Send again the ' + failed.items.length + ' failed deliveries of endpoint ' + endpoint.id + ' created in the last ' + duration(hours * 3600000) + '?')) {
    outcome(line, 'Recover cancelled.');
    return;
  }
  const answer = await api('POST', '/v1/webhooks/endpoints/' + encodeURIComponent(endpoint.id) + '/recover', { since });
  line.dataset.id = endpoint.id;
  line.dataset.recovered = String(answer.recovered);
  outcome(line, 'Recover ' + endpoint.id + ': ' + answer.recovered + ' sent again.');
  refreshAll();
  const ids = failed.items.map((item) => item.id);
  await watch(line, 'recovered (endpoint ' + endpoint.id + ')', ids.slice(0, 10), answer.recovered,
    probeWebhooks(endpoint.id), QUEUES.webhooks.settled, refreshAll);
  const now = (await api('GET', '/v1/webhooks/endpoints')).items.find((e) => e.id === endpoint.id);
  if (now) line.textContent += ' Endpoint now ' + now.status + ', last number ' + now.lastSequence + '.';
}

// Unsettled custody: (event, listener) starts without a receipt handed to operators (or, with
// "all", still being restarted). Replaying the event for that listener starts it afresh.
async function loadCustody() {
  const all = $('custody-all').checked;
  const answer = await api('GET', '/v1/system/outbox/unsettled?all=' + all + '&limit=100');
  fill($('custody-rows').tBodies[0], answer.items, (tr, u) => {
    tr.dataset.id = u.eventId;
    cell(tr, button(u.eventId, () => explain(u.eventId), undefined, 'Explain this event'), 'code');
    cell(tr, u.listener, 'code'); cell(tr, when(u.startedAt)); cell(tr, u.restarts);
    cell(tr, u.stuckAt ? badge('stuck') : badge('restarting'));
    cell(tr, button('Replay for ' + u.listener, () => replayFor(u).catch((error) => outcome($('custody-result'), error.message, true)),
      'replay-' + u.eventId + '-' + u.listener));
  }, all ? 'Every start has its receipt.' : 'Nothing handed to operators.');
}

async function replayFor(u) {
  const line = $('custody-result');
  const reasonBox = $('custody-reason');
  if (!reasonBox.value.trim()) throw new Error('A reason is required (the Reason box above).');
  const record = await api('POST', '/v1/system/outbox/' + encodeURIComponent(u.eventId) + '/replay',
    { reason: reasonBox.value, listeners: [u.listener] });
  reasonBox.value = '';
  outcome(line, 'replay ' + u.eventId + ' for ' + u.listener + ': ' + record.statusBefore + ' → ' + record.statusAfter);
  refreshAll();
  await watch(line, 'replayed (' + u.eventId + ')', [u.eventId], 1, probeOutbox, OUTBOX_SETTLED, refreshAll);
}

// Rejections: deliveries a listener refused (newest first), by event and reason code.
let rejectionCursor = null;

async function loadRejections(more) {
  const params = new URLSearchParams(formValues($('rejections-filter'), ['eventId', 'reason']));
  params.set('limit', '50');
  if (more && rejectionCursor) params.set('cursor', rejectionCursor);
  const page = await api('GET', '/v1/system/rejections?' + params.toString());
  const tbody = $('rejection-rows').tBodies[0];
  if (!more) tbody.replaceChildren();
  for (const r of page.items) {
    const tr = tbody.insertRow();
    cell(tr, when(r.rejectedAt));
    cell(tr, button(r.eventId, () => explain(r.eventId), undefined, 'Explain this event'), 'code');
    cell(tr, r.listener, 'code'); cell(tr, badge(r.reason)); cell(tr, r.transport); cell(tr, r.messageId, 'code');
  }
  if (tbody.rows.length === 0) fill(tbody, [], () => {}, 'No rejection recorded.');
  rejectionCursor = page.nextCursor || null;
  $('rejections-more').hidden = !rejectionCursor;
}
