// Drives the operators' console in a real browser (Debian's Chromium through playwright-core):
// token → overview (its ages, the oldest unsettled one included) → dead rows of one error code → explain view → bulk retry with a dry run and a
// reason. Prints one JSON line with what it saw; tests/console-browser checks the audit rows.
//
// Env: BASE (API base URL), TOKEN (admin bearer token), CODE (the planted error code),
//      PLANTED (how many dead rows were planted), SCREENSHOT (where the overview PNG goes),
//      PROFILE (a fresh --user-data-dir), PLAYWRIGHT (path of the playwright-core package).
import { createRequire } from 'node:module';

const require = createRequire(import.meta.url);
const { chromium } = require(process.env.PLAYWRIGHT);
const { BASE, TOKEN, CODE, PLANTED, SCREENSHOT, PROFILE } = process.env;
const REASON = 'browser test: provider back';

const context = await chromium.launchPersistentContext(PROFILE, {
  executablePath: '/usr/bin/chromium',
  headless: true,
  args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
    '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  viewport: { width: 1280, height: 900 },
});
const errors = [];
try {
  const page = context.pages()[0] || await context.newPage();
  // Failed loads are checked by URL below (the browser's own /favicon.ico probe is not the console's).
  page.on('console', (message) => {
    if (message.type() === 'error' && !message.text().startsWith('Failed to load resource')) errors.push(message.text());
  });
  page.on('response', (response) => {
    if (response.status() >= 400 && new URL(response.url()).pathname !== '/favicon.ico') {
      errors.push(response.status() + ' ' + response.url());
    }
  });
  page.on('pageerror', (error) => errors.push(String(error)));
  // Only this origin is ever asked for anything.
  page.on('request', (request) => { if (!request.url().startsWith(BASE)) errors.push('foreign request ' + request.url()); });
  page.setDefaultTimeout(30_000);

  await page.goto(BASE + '/console');
  await page.getByLabel('Bearer token (admin)').fill(TOKEN);
  await page.keyboard.press('Enter'); // keyboard use: the form submits from the field
  await page.locator('#show-dead-' + CODE).waitFor();
  const deadCell = await page.locator('#dead-codes tbody tr', { hasText: CODE }).locator('td').nth(1).textContent();
  const unsettled = await page.locator('#age-unsettled').textContent();
  const live = await page.locator('#age-live').textContent();
  await page.screenshot({ path: SCREENSHOT, fullPage: false });

  await page.locator('#show-dead-' + CODE).click();
  await page.locator('#rows tbody tr').first().waitFor();
  await page.waitForFunction((n) => document.querySelectorAll('#rows tbody tr').length === n, Number(PLANTED));
  const firstEvent = (await page.locator('#rows tbody tr td button').first().textContent()).trim();
  await page.locator('#rows tbody tr td button').first().focus();
  await page.keyboard.press('Enter');
  await page.locator('#explain-body section[data-section="listeners"]').waitFor();
  const sections = await page.locator('#explain-body section').evaluateAll((all) => all.map((s) => s.dataset.section));
  const published = await page.locator('#explain-published').textContent();
  const trace = await page.locator('#explain-trace').textContent();

  await page.getByLabel('Action', { exact: true }).first().selectOption('retry');
  await page.getByLabel('Reason (required)').first().fill(REASON);
  await page.locator('#bulk-dry-run').click();
  await page.waitForFunction(() => document.getElementById('bulk-result').dataset.matched !== undefined);
  const matched = await page.locator('#bulk-result').getAttribute('data-matched');
  const dryRunText = await page.locator('#bulk-result').textContent();
  await page.locator('#bulk-apply').click();
  await page.waitForFunction(() => document.getElementById('bulk-result').dataset.applied !== undefined);
  const applied = await page.locator('#bulk-result').getAttribute('data-applied');
  const batch = await page.locator('#bulk-result').getAttribute('data-batch');
  console.log(JSON.stringify({ deadCell, unsettled, live, firstEvent, sections, published, trace, matched, dryRunText, applied, batch, reason: REASON, errors }));
} finally {
  await context.close();
}
