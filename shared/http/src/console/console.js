// The console's start-up: the token (sessionStorage only) and the header naming whom it acts as,
// the overview, the listeners (pause and resume), "as of" with auto-refresh, and Forget, which
// clears the screen. Loaded last; uses console-core.js, console-explain.js and console-queues.js.
'use strict';

let refreshTimer = null;
let refreshing = false;

function say(text, isError) {
  outcome($('status'), text, isError);
}

// The header: workspace (name and id), subject, role and the token's expiry.
function renderWho(workspace) {
  const who = $('who');
  who.replaceChildren();
  const c = claims();
  if (!c) return;
  const role = c.role || c['custom:role'] || (Array.isArray(c['cognito:groups']) ? c['cognito:groups'].join(',') : '');
  const parts = [];
  if (workspace) parts.push(['Workspace', (workspace.name || '(unnamed)') + ' · ' + workspace.id, 'who-workspace']);
  parts.push(['Subject', c.sub || '?', 'who-subject'], ['Role', role || '?', 'who-role']);
  for (const [label, value, id] of parts) {
    const span = el('span', undefined, 'who-part');
    span.append(el('b', label + ' '), el('span', value, 'code'));
    span.id = id;
    who.appendChild(span);
  }
  if (c.exp) {
    const at = new Date(c.exp * 1000).toISOString();
    const span = el('span', undefined, 'who-part');
    span.id = 'who-expiry';
    const expired = c.exp * 1000 <= Date.now();
    span.append(el('b', 'Token '), expired ? badge('expired') : el('span', 'expires '), when(at));
    if (expired) span.classList.add('error');
    who.appendChild(span);
  }
}

async function loadOverview() {
  const o = await api('GET', '/v1/system/overview');
  maxAttempts = o.outboxMaxAttempts || null;
  renderWho(o.workspace);
  fill($('by-status').tBodies[0], Object.entries(o.byStatus), (tr, [status, n]) => {
    tr.dataset.status = status;
    cell(tr, badge(status));
    cell(tr, status === 'dispatched' && o.dispatchedCapped ? n + '+' : n);
  });
  const ages = $('ages');
  ages.replaceChildren();
  for (const [label, value, id] of [
    ['Oldest due row waiting', o.oldestPendingAgeMs, 'age-pending'],
    ['Oldest live row', o.oldestLiveAgeMs, 'age-live'],
    ['Oldest unsettled event, all workspaces', o.oldestUnsettledAgeMs, 'age-unsettled'],
  ]) {
    const term = el('dt', label);
    const detail = el('dd', value ? duration(value) : 'none');
    detail.id = id;
    detail.dataset.ms = String(value);
    ages.append(term, detail);
  }
  fill($('dead-codes').tBodies[0], Object.entries(o.deadByErrorCode), (tr, [code, n]) => {
    cell(tr, inWords(code), 'code'); cell(tr, n);
    cell(tr, button('Show the ' + n + ' dead rows', () => {
      // A fresh filter: only these rows (never a previous search's leftovers).
      $('outbox-filter').reset();
      $('outbox-f-status').value = 'dead';
      if (code !== 'none') $('outbox-f-errorCode').value = code;
      loadQueue('outbox').catch(fail('outbox'));
      $('outbox-title').scrollIntoView();
    }, 'show-dead-' + code));
  }, 'No dead rows.');
  fill($('paused').tBodies[0], o.pausedListeners, (tr, p) => {
    cell(tr, badge('paused')); cell(tr, p.listener, 'code'); cell(tr, p.held); cell(tr, p.pausedBy, 'code'); cell(tr, when(p.pausedAt));
  }, 'No listener is paused.');
}

async function loadListeners() {
  const answer = await api('GET', '/v1/system/listeners');
  fill($('listener-rows').tBodies[0], answer.items, (tr, l) => {
    tr.dataset.listener = l.listener;
    cell(tr, l.listener, 'code');
    cell(tr, l.eventTypes.join(', '), 'code');
    cell(tr, badge(l.paused ? 'paused' : 'running'));
    cell(tr, l.held);
    cell(tr, button((l.paused ? 'Resume ' : 'Pause ') + l.listener, () => toggle(l).catch((error) => outcome($('listener-result'), error.message, true)),
      (l.paused ? 'resume-' : 'pause-') + l.listener));
  });
}

async function toggle(listener) {
  const line = $('listener-result');
  const reasonBox = $('pause-reason');
  if (!reasonBox.value.trim()) throw new Error('A reason is required to ' + (listener.paused ? 'resume ' : 'pause ') + listener.listener + '.');
  const verb = listener.paused ? 'resume' : 'pause';
  const held = verb === 'resume'
    ? (await api('GET', '/v1/system/outbox?status=retry&errorCode=listener_paused&limit=100')).items.map((i) => i.eventId)
    : [];
  const question = verb === 'pause'
    ? 'Pause ' + listener.listener + '? New starts of ' + listener.eventTypes.join(', ') + ' are held until it is resumed.'
    : 'Resume ' + listener.listener + '? It releases the ' + listener.held + ' row(s) it holds.';
  if (!confirmed(question)) {
    outcome(line, verb + ' cancelled.');
    return;
  }
  const record = await api('POST', '/v1/system/listeners/' + verb, { listener: listener.listener, reason: reasonBox.value });
  reasonBox.value = '';
  line.dataset.listener = record.listener;
  line.dataset.action = verb;
  if (verb === 'pause') {
    outcome(line, 'paused ' + record.listener + ': its new starts are held.');
    await refreshAll();
    return;
  }
  line.dataset.released = String(record.released);
  outcome(line, 'resumed ' + record.listener + ': released ' + record.released + ' row(s).');
  refreshAll();
  await watch(line, 'released by resuming ' + record.listener, held.slice(0, 10), record.released, probeOutbox, OUTBOX_SETTLED, refreshAll);
}

// Reloads everything on screen (the lists keep their filters); says "as of" when done.
async function refreshAll() {
  if (!token() || refreshing) return;
  refreshing = true;
  try {
    await loadOverview();
    await Promise.all([
      ...Object.keys(QUEUES).map((name) => loadQueue(name).catch(fail(name))),
      loadListeners(), loadEndpoints(), loadCustody(), loadRejections(),
      explained ? explain(explained.eventId, true) : Promise.resolve(),
    ]);
    const now = new Date();
    const asOf = $('as-of');
    asOf.textContent = 'As of ' + now.toLocaleTimeString();
    asOf.dateTime = now.toISOString();
    asOf.title = exact(now.toISOString());
    say('');
  } catch (error) {
    say(error.message, true);
  } finally {
    refreshing = false;
  }
}

function setRefresh() {
  if (refreshTimer) clearInterval(refreshTimer);
  refreshTimer = null;
  const seconds = Number($('refresh-every').value);
  if (seconds > 0 && token()) refreshTimer = setInterval(refreshAll, seconds * 1000);
}

// Forget: the token goes, and so does everything it showed.
function forget(message) {
  sessionStorage.removeItem(TOKEN_KEY);
  if (refreshTimer) clearInterval(refreshTimer);
  refreshTimer = null;
  $('refresh-every').value = '0';
  clearExplanation();
  for (const tbody of document.querySelectorAll('main tbody')) tbody.replaceChildren();
  for (const line of document.querySelectorAll('main .result, main [role="status"]')) { line.textContent = ''; line.className = 'result'; }
  for (const list of document.querySelectorAll('main dl')) list.replaceChildren();
  for (const form of document.querySelectorAll('main form')) form.reset();
  $('who').replaceChildren();
  $('as-of').textContent = '';
  say(message || 'Token forgotten; the screen is cleared.');
}

document.addEventListener('DOMContentLoaded', () => {
  for (const name of Object.keys(QUEUES)) buildQueue(name);
  setOnUnauthorized(() => {
    if (refreshTimer) clearInterval(refreshTimer);
    refreshTimer = null;
    $('refresh-every').value = '0';
    say('The token was refused (expired or not valid): paste a new one.', true);
    $('token').focus();
  });
  $('auth-form').addEventListener('submit', (event) => {
    event.preventDefault();
    sessionStorage.setItem(TOKEN_KEY, $('token').value.trim());
    $('token').value = '';
    renderWho(null);
    refreshAll().then(setRefresh);
  });
  $('token-forget').addEventListener('click', () => forget());
  $('refresh-now').addEventListener('click', () => refreshAll());
  $('refresh-every').addEventListener('change', setRefresh);
  $('explain-form').addEventListener('submit', (event) => { event.preventDefault(); explain($('explain-id').value.trim()); });
  $('single-form').addEventListener('submit', (event) => { event.preventDefault(); single().catch((error) => outcome($('single-result'), error.message, true)); });
  $('custody-all').addEventListener('change', () => loadCustody().catch((error) => outcome($('custody-result'), error.message, true)));
  $('rejections-filter').addEventListener('submit', (event) => {
    event.preventDefault();
    loadRejections(false).catch((error) => outcome($('rejections-result'), error.message, true));
  });
  $('rejections-more').addEventListener('click', () => loadRejections(true).catch((error) => outcome($('rejections-result'), error.message, true)));
  if (token()) { renderWho(null); refreshAll().then(setRefresh); } else say('Paste an admin bearer token to start.');
});
