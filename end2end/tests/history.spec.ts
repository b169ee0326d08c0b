import { expect, Page, test } from '@playwright/test';
import { readFileSync } from 'node:fs';
import { Stack } from './stack';

// The incident-review page on the embedded default: the demo fleet's history
// as a table, one lock's timeline, the lock table at an instant (the same
// locks as the API's time travel), and the CSV export of the page's query
// (the same events as the API's JSON for it). Screenshots go to
// end2end/test-results/screens/.
test.describe.configure({ mode: 'serial' });

let stack: Stack;
test.beforeAll(async () => {
  stack = await Stack.startEmbedded();
});
test.afterAll(async () => {
  await stack?.stop();
});

const shot = (page: Page, name: string) =>
  page.screenshot({ path: `test-results/screens/${name}.png`, fullPage: true });

/** The page, hydrated (the wasm loaded and ran), failing on any script error. */
async function open(page: Page, path: string): Promise<void> {
  const errors: string[] = [];
  page.on('pageerror', (e) => errors.push(String(e)));
  await page.goto(`${stack.url}${path}`, { waitUntil: 'networkidle' });
  expect(errors, `script errors on ${path}`).toEqual([]);
}

/** Until the history holds `kind` events of the last 5 minutes (the writer works in batches). */
async function waitForEvents(kind: string): Promise<void> {
  const deadline = Date.now() + 30_000;
  while (Date.now() < deadline) {
    const r = await stack.api('GET', `/api/v1/fleets/embedded/history?from=-5m&kind=${kind}&limit=1`);
    if (r.status === 200 && r.json.length > 0) return;
    await new Promise((ok) => setTimeout(ok, 250));
  }
  throw new Error(`no ${kind} events in the history:\n${stack.log()}`);
}

/** RFC 4180 rows (quoted cells may hold commas, quotes and line breaks). */
function csvRows(text: string): string[][] {
  const rows: string[][] = [];
  let row: string[] = [];
  let cell = '';
  let quoted = false;
  for (let i = 0; i < text.length; i++) {
    const c = text[i];
    if (quoted) {
      if (c === '"' && text[i + 1] === '"') (cell += '"'), i++;
      else if (c === '"') quoted = false;
      else cell += c;
    } else if (c === '"') quoted = true;
    else if (c === ',') row.push(cell), (cell = '');
    else if (c === '\n') row.push(cell), rows.push(row), (row = []), (cell = '');
    else if (c !== '\r') cell += c;
  }
  if (cell !== '' || row.length > 0) row.push(cell), rows.push(row);
  return rows;
}

test('the demo fleet history lists its kinds as words, and a lock has a timeline', async ({ page }) => {
  await waitForEvents('acquired');
  await open(page, '/history?fleet=embedded&from=-5m');
  await expect(page.getByTestId('history-read-at')).toContainText('Not live');
  const rows = page.getByTestId('history-row');
  await expect(rows.first()).toBeVisible();
  const kinds = await rows.evaluateAll((rs) => rs.map((r) => r.getAttribute('data-kind')));
  expect(kinds).toContain('acquired');
  await expect(page.locator('[data-testid="history-row"][data-kind="acquired"] [data-testid="history-kind"]').first()).toHaveText(
    'acquired',
  );
  await expect(page.getByTestId('nav-history')).toHaveAttribute('aria-current', 'page');

  // The first acquired lock's own history draws its timeline.
  const lock = await page.locator('[data-testid="history-row"][data-kind="acquired"] td.lock a').first().textContent();
  await open(page, `/history?fleet=embedded&from=-5m&lock=${encodeURIComponent(lock!)}`);
  await expect(page.getByTestId('timeline')).toBeVisible();
  expect(await page.getByTestId('timeline-hold').count()).toBeGreaterThan(0);
  await shot(page, 'history-timeline');
});

test('time travel shows the locks the API says were held at that instant', async ({ page }) => {
  // An instant a little in the past: everything seen before it is written by now.
  await page.waitForTimeout(3000);
  const at = new Date(Date.now() - 2000).toISOString();
  const api = await stack.api('GET', `/api/v1/fleets/embedded/table?at=${encodeURIComponent(at)}`);
  expect(api.status, JSON.stringify(api.json)).toBe(200);
  const want: string[] = api.json.locks.map((l: { name: string }) => l.name).sort();

  await open(page, `/history?fleet=embedded&at=${encodeURIComponent(at)}&from=-5m`);
  await expect(page.getByTestId('travel-title')).toContainText('Lock table at');
  await expect(page.getByTestId('travel-source')).toContainText(/Rebuilt from .* events?/);
  const shown = await page
    .locator('[data-testid="travel"] [data-testid="lock-row"]')
    .evaluateAll((rs) => rs.map((r) => r.getAttribute('data-lock')!));
  expect(shown.sort()).toEqual(want);
  await expect(page.getByTestId('diff-summary')).toContainText('taken');
  await shot(page, 'history-travel');

  // With JavaScript, letting go of the slider shows the table at its instant.
  const slider = page.getByTestId('travel-slider');
  const min = Number(await slider.getAttribute('min'));
  await slider.fill(String(min + 1000 * Math.floor((Date.now() - 60_000 - min) / 1000)));
  await expect(page).toHaveURL(/[?&]at=\d+/);
  await expect(page.getByTestId('travel-title')).toContainText('Lock table at');

  // At 390 px nothing but the tables' own scrollers is wider than the screen.
  await page.setViewportSize({ width: 390, height: 800 });
  const overflow = await page.evaluate(() => document.documentElement.scrollWidth);
  expect(overflow).toBeLessThanOrEqual(390);
  await shot(page, 'history-narrow');
});

test('the CSV export of the page is the API answer to the same query', async ({ page }) => {
  // A range that ended a little before: nothing more arrives in it between the page and the API.
  const limit = 200;
  await open(page, `/history?fleet=embedded&from=-5m&to=-2s&limit=${limit}`);
  const link = page.getByTestId('history-export-csv');
  const href = (await link.getAttribute('href'))!;
  expect(href).toContain(`limit=${limit}`);
  expect(href).toMatch(/[?&]to=/);
  const [download] = await Promise.all([page.waitForEvent('download'), link.click()]);
  const text = readFileSync((await download.path())!, 'utf8');
  const lines = csvRows(text);
  expect(text.startsWith('# lockscope history v1')).toBe(true);
  expect(lines[1].slice(0, 4)).toEqual(['id', 'at', 'fleet', 'kind']);
  const data = lines.slice(2);

  const json = await stack.api('GET', href.replace('format=csv', 'format=json'));
  expect(json.status).toBe(200);
  expect(json.json.length).toBeGreaterThan(0);
  expect(json.json.length).toBeLessThanOrEqual(limit);
  expect(data.length).toBe(json.json.length);
  expect(data.map((r) => r[0])).toEqual(json.json.map((e: { id: string }) => e.id));
  // The page shows those same events.
  expect(await page.getByTestId('history-row').count()).toBe(json.json.length);
});
