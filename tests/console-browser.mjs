// Drives the operators' console in a real browser (Debian's Chromium through playwright-core) and
// ends four staged incidents through the console alone, reading each outcome off the page:
// a paused listener (resume, watched until its held row is dispatched), a dead batch (dead rows by
// code → dry run → confirmed apply, watched until dispatched), a dead email (retried from its row,
// watched until sent) and a failing webhook endpoint (recover since, watched until delivered, the
// endpoint active again). Also: explain as a story, the wrong-event case (explain A, type B into
// the box, act: A is acted on), a failed explain clearing the old one, phone width, Forget and a
// refused token. Prints one JSON line with what it saw; tests/console-browser checks it and the
// database. Screenshots go to $DOCS/console-*.png.
//
// Env: BASE (API base URL), TOKEN (admin bearer token), CODE (the dead batch's error code),
//      PLANTED (its size), EMAIL_CODE, ENDPOINT (the failing endpoint's id), HOOK_PORT (where its
//      receiver is started), DOCS, PROFILE (a fresh --user-data-dir), PLAYWRIGHT (playwright-core).
import { createRequire } from 'node:module';
import http from 'node:http';

const require = createRequire(import.meta.url);
const { chromium } = require(process.env.PLAYWRIGHT);
const { BASE, TOKEN, CODE, PLANTED, ENDPOINT, PATIENT, HOOK_PORT, DOCS, PROFILE } = process.env;
const REASON = 'browser test: provider back';
const WATCHED = 45_000; // longer than the console's own watch window (30 s)

const context = await chromium.launchPersistentContext(PROFILE, {
  executablePath: '/usr/bin/chromium',
  headless: true,
  args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
    '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  viewport: { width: 1280, height: 900 },
});
const errors = [];
const dialogs = [];
let expectFailures = false; // set around the steps that provoke a 404 and a 401
let receiver = null;
const result = { reason: REASON, errors };
try {
  const page = context.pages()[0] || await context.newPage();
  page.on('console', (message) => {
    if (message.type() === 'error' && !message.text().startsWith('Failed to load resource')) errors.push(message.text());
  });
  page.on('response', (response) => {
    if (response.status() >= 400 && new URL(response.url()).pathname !== '/favicon.ico' && !expectFailures) {
      errors.push(response.status() + ' ' + response.url());
    }
  });
  page.on('pageerror', (error) => errors.push(String(error)));
  // How long each action's call took (request sent → answer read), for the report.
  result.actionMs = [];
  page.on('requestfinished', (request) => {
    if (request.method() !== 'POST') return;
    const path = new URL(request.url()).pathname.replace(/[0-9A-HJKMNP-TV-Z]{26}/g, '{id}');
    result.actionMs.push(path + ' ' + Math.round(request.timing().responseEnd) + ' ms');
  });
  page.on('request', (request) => { if (!request.url().startsWith(BASE)) errors.push('foreign request ' + request.url()); });
  // Every destructive action confirms; the test reads what the question names, then accepts.
  page.on('dialog', (dialog) => { dialogs.push(dialog.message()); dialog.accept(); });
  page.setDefaultTimeout(30_000);
  const text = async (selector) => ((await page.locator(selector).first().textContent()) || '').trim();
  const settled = (selector) => page.waitForFunction(
    (sel) => ['settled', 'timeout'].includes(document.querySelector(sel).dataset.watch), selector, { timeout: WATCHED });
  const shot = (name) => page.screenshot({ path: `${DOCS}/console-${name}.png`, fullPage: false });
  const show = (id) => page.locator('#' + id).evaluate((node) => node.scrollIntoView());

  // The token, from the keyboard; the header and the overview.
  await page.goto(BASE + '/console');
  await page.getByLabel('Bearer token (admin)').fill(TOKEN);
  await page.keyboard.press('Enter');
  await page.locator('#show-dead-' + CODE).waitFor();
  await page.locator('#who-expiry').waitFor();
  result.who = {
    workspace: await text('#who-workspace'), subject: await text('#who-subject'),
    role: await text('#who-role'), expiry: await text('#who-expiry'),
  };
  result.deadCell = (await page.locator('#dead-codes tbody tr', { hasText: CODE }).locator('td').nth(1).textContent()).trim();
  result.pausedRow = await text('#paused tbody tr');
  result.unsettledMs = await page.locator('#age-unsettled').getAttribute('data-ms');
  await page.locator('#endpoint-rows tbody tr[data-id]').first().waitFor();
  await shot('overview');
  const endpointRow = page.locator(`#endpoint-rows tbody tr[data-id="${ENDPOINT}"]`);
  result.webhook = {
    before: {
      status: await endpointRow.getAttribute('data-status'),
      lastSequence: ((await endpointRow.locator('td').nth(2).textContent()) || '').trim(),
    },
  };

  // "As of" moves on by itself with auto-refresh every 5 s (then off again for the steps below).
  const asOf = await page.locator('#as-of').getAttribute('datetime');
  await page.locator('#refresh-every').selectOption('5');
  await page.waitForFunction((before) => document.getElementById('as-of').dateTime !== before, asOf, { timeout: 12_000 });
  await page.locator('#refresh-every').selectOption('0');
  result.autoRefreshed = true;

  // Unsettled custody: the planted start without a receipt (before the retry below settles it).
  await page.locator('#custody-all').check();
  await page.locator('#custody-rows tbody tr[data-id]').first().waitFor();
  result.custodyRows = await page.locator('#custody-rows tbody tr[data-id]').count();
  await show('custody-title');
  await shot('custody');

  // Incident 1: a paused listener holding a cancellation → resume (confirmed), watched.
  await show('listeners-title');
  await page.getByLabel('Reason for pause or resume (required)').fill('template fixed');
  await page.locator('#resume-patient_cancellation_notice').click();
  await settled('#listener-result');
  result.resume = { dialog: dialogs.at(-1), text: await text('#listener-result') };

  // Incident 2: the dead batch → its rows (a fresh filter) → dry run → apply (confirmed), watched.
  await page.locator('#show-dead-' + CODE).click();
  await page.waitForFunction((n) => document.querySelectorAll('#outbox-rows tbody tr[data-id]').length === n, Number(PLANTED));
  await shot('outbox');
  const batch = await page.locator('#outbox-rows tbody tr[data-id]').evaluateAll((rows) => rows.map((r) => r.dataset.id));
  await page.locator('#outbox-bulk-action').selectOption('retry');
  await page.locator('#outbox-reason').fill(REASON);
  await page.locator('#outbox-dry-run').click();
  await page.waitForFunction(() => document.getElementById('outbox-bulk-result').dataset.matched !== undefined);
  const matched = await page.locator('#outbox-bulk-result').getAttribute('data-matched');
  await page.locator('#outbox-apply').click();
  await page.waitForFunction(() => document.getElementById('outbox-bulk-result').dataset.applied !== undefined);
  await settled('#outbox-bulk-result');
  result.bulk = {
    matched, dialog: dialogs.at(-1),
    applied: await page.locator('#outbox-bulk-result').getAttribute('data-applied'),
    batch: await page.locator('#outbox-bulk-result').getAttribute('data-batch'),
    text: await text('#outbox-bulk-result'),
    reasonAfter: await page.locator('#outbox-reason').inputValue(),
  };
  // The list refreshed after the action: the same filter now lists nothing dead; the rows show dispatched.
  await page.locator('#outbox-filter').evaluate((form) => form.reset());
  await page.locator('#outbox-search').click();
  await page.waitForFunction((ids) => ids.every((id) => {
    const row = document.querySelector(`#outbox-rows tbody tr[data-id="${id}"]`);
    return row && row.dataset.status === 'dispatched';
  }), batch);
  result.rowsAfter = await page.locator('#outbox-rows tbody tr[data-id]').evaluateAll(
    (rows, ids) => rows.filter((r) => ids.includes(r.dataset.id)).map((r) => r.dataset.status), batch);

  // Explain as a story; then the wrong-event case: explain A, type B into the box, act → A.
  const [shown, typed] = batch;
  await page.locator(`#outbox-rows tbody tr[data-id="${shown}"] td button`).first().focus();
  await page.keyboard.press('Enter');
  await page.locator('#explain-summary').waitFor();
  result.explain = {
    sections: await page.locator('#explain-body section').evaluateAll((all) => all.map((s) => s.dataset.section)),
    published: await text('#explain-published'),
    trace: await text('#explain-trace'),
    attempt: await text('#explain-attempt'),
    timelineRows: String(await page.locator('#explain-timeline tbody tr').count()),
  };
  await shot('explain');
  await page.locator('#explain-id').fill(typed);
  await page.locator('#single-action').selectOption('replay');
  await page.locator('#single-reason').fill('browser test: lost notices');
  await page.locator('#single-apply').click();
  await page.waitForFunction(() => document.getElementById('single-result').dataset.eventId !== undefined);
  await settled('#single-result');
  result.wrongEvent = {
    shown, typed,
    actedOn: await page.locator('#single-result').getAttribute('data-event-id'),
    text: await text('#single-result'),
  };
  // At phone width the explanation fits (cells wrap; wide tables scroll inside their own box).
  await page.setViewportSize({ width: 390, height: 844 });
  await show('explain-title');
  result.phoneWidth = await page.evaluate(() => document.documentElement.scrollWidth);
  await shot('phone');
  await page.setViewportSize({ width: 1280, height: 900 });
  // A failed explain clears the old one.
  expectFailures = true;
  await page.locator('#explain-id').fill('01ARZ3NDEKTSV4RRFFQ69G5FAV');
  await page.locator('#explain-go').click();
  await page.waitForFunction(() => document.getElementById('explain-result').textContent.includes('failed'));
  expectFailures = false;
  result.failedExplain = {
    body: await text('#explain-body'),
    formHidden: await page.locator('#single-form').isHidden(),
    error: await text('#explain-result'),
  };

  // Incident 3: the dead email → its row → retry, watched until sent.
  await page.locator('#deliveries-f-status').selectOption('dead');
  await page.locator('#deliveries-search').click();
  await page.waitForFunction(() => document.querySelectorAll('#deliveries-rows tbody tr[data-id]').length === 1);
  await show('deliveries-title');
  await shot('notifications');
  const email = await page.locator('#deliveries-rows tbody tr[data-id]').getAttribute('data-id');
  // First the retry dies again: the patient's address was removed meanwhile (another staff member,
  // through the API), so the watch must end at "→ 1 no_contact again: <code>", marked for attention.
  const patch = (body) => fetch(BASE + '/v1/patients/' + PATIENT, {
    method: 'PATCH',
    headers: { authorization: 'Bearer ' + TOKEN, 'content-type': 'application/json' },
    body: JSON.stringify(body),
  }).then((answer) => { if (!answer.ok) throw new Error('PATCH patient answered ' + answer.status); });
  await patch({ email: null });
  await page.locator('#deliveries-reason').fill('bounce cleared');
  await page.locator('#deliveries-retry-' + email).click();
  await settled('#deliveries-row-result');
  result.emailAgain = {
    text: await text('#deliveries-row-result'),
    attention: await page.locator('#deliveries-row-result').evaluate((node) => node.classList.contains('error')),
  };
  // The address is fixed; the row (now no_contact) is retried from the list again, watched until sent.
  await patch({ email: 'probe@example.com' });
  await page.locator('#deliveries-f-status').selectOption('no_contact');
  await page.locator('#deliveries-search').click();
  await page.waitForFunction((id) => document.querySelector('#deliveries-retry-' + id) !== null, email);
  await page.locator('#deliveries-reason').fill('address fixed');
  await page.locator('#deliveries-retry-' + email).click();
  // The line still says how the first retry ended until this one answers: wait for its own outcome.
  await page.waitForFunction((id) => document.querySelector('#deliveries-row-result').textContent
    .startsWith('retry ' + id + ': no_contact'), email, { timeout: WATCHED });
  await settled('#deliveries-row-result');
  result.email = { id: email, text: await text('#deliveries-row-result') };

  // Incident 4: the failing endpoint (status and last number shown) → the receiver is back →
  // recover since (confirmed), watched until delivered, the endpoint active again.
  await page.locator('#show-endpoint-' + ENDPOINT).click();
  await page.waitForFunction(() => document.querySelectorAll('#webhooks-rows tbody tr[data-id]').length > 0);
  await show('endpoints-title');
  await shot('webhooks');
  receiver = http.createServer((request, response) => { request.resume(); request.on('end', () => { response.writeHead(204); response.end(); }); });
  await new Promise((resolve) => receiver.listen(Number(HOOK_PORT), '127.0.0.1', resolve));
  await page.locator('#recover-' + ENDPOINT).click();
  await settled('#endpoint-result');
  await page.waitForFunction(() => document.getElementById('endpoint-result').textContent.includes('Endpoint now'));
  result.webhook.dialog = dialogs.at(-1);
  result.webhook.text = await text('#endpoint-result');

  // Rejections: their view.
  await page.locator('#rejections-search').click();
  await show('rejections-title');
  await shot('rejections');

  // Forget clears the screen; a refused token asks for a new one.
  await page.locator('#token-forget').click();
  result.forgotten = {
    rows: await page.locator('main tbody tr').count(),
    explain: await text('#explain-body'),
    who: await text('#who'),
  };
  expectFailures = true;
  await page.getByLabel('Bearer token (admin)').fill('not-a-token');
  await page.locator('#token-save').click();
  await page.waitForFunction(() => document.getElementById('status').textContent.includes('refused'));
  result.refused = await text('#status');
  expectFailures = false;
  console.log(JSON.stringify(result));
} finally {
  if (receiver) receiver.close();
  await context.close();
}
