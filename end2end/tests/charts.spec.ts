import { expect, Page, test } from '@playwright/test';
import { Stack } from './stack';

// The contention charts page on the embedded default (the demo fleet, whose
// sessions contend): the history's count of waits started in the page's
// window is the API's export of the same window, the page refreshes by
// itself, the window picker switches windows, and a 390 px screen does not
// scroll sideways. Screenshots go to end2end/test-results/screens/charts-*.png.
test.describe.configure({ mode: 'serial' });

let stack: Stack;
test.beforeAll(async () => {
  stack = await Stack.startEmbedded();
});
test.afterAll(async () => {
  await stack?.stop();
});

const shot = (page: Page, name: string) =>
  page.screenshot({ path: `test-results/screens/charts-${name}.png`, fullPage: true });

/** The page, hydrated (the wasm ran: the charts are drawn and the page is live), failing on any script error. */
async function open(page: Page, path: string): Promise<string[]> {
  const errors: string[] = [];
  page.on('pageerror', (e) => errors.push(String(e)));
  page.on('console', (m) => {
    if (m.type() === 'error') errors.push(m.text());
  });
  await page.goto(`${stack.url}${path}`, { waitUntil: 'networkidle' });
  await expect(page.getByTestId('charts-status')).toHaveAttribute('data-state', 'live');
  await expect(page.locator('[data-testid="chart-acquisitions"] svg').first()).toBeVisible();
  expect(errors, `script errors on ${path}`).toEqual([]);
  return errors;
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

/** The window's bounds and the waits started the page shows for it, read at once (the page refreshes). */
async function shown(page: Page): Promise<{ from: string; to: string; waits: string; top: string | null }> {
  return page.evaluate(() => {
    const w = document.querySelector('[data-testid="charts-window"]')!;
    return {
      from: w.getAttribute('data-from')!,
      to: w.getAttribute('data-to')!,
      waits: document.querySelector('[data-testid="seen-waits-total"]')!.textContent!.trim(),
      top: document.querySelector('[data-testid="top-lock"] a')?.getAttribute('href') ?? null,
    };
  });
}

test('the waits started the page counts are the history export of its window', async ({ page }) => {
  await waitForEvents('wait_started');
  const errors = await open(page, '/charts?fleet=embedded&window=5m');
  await expect(page.getByTestId('nav-charts')).toHaveAttribute('aria-current', 'page');
  await expect(page.getByTestId('window-5m')).toHaveAttribute('aria-current', 'page');
  const { from, to, waits, top } = await shown(page);
  expect(from).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);
  expect(Date.parse(to) - Date.parse(from)).toBeGreaterThan(295_000);
  expect(waits).toMatch(/^\d+$/);
  const n = Number(waits);
  expect(n).toBeGreaterThan(0);

  const q = `from=${encodeURIComponent(from)}&to=${encodeURIComponent(to)}&kind=wait_started&format=ndjson`;
  const r = await stack.api('GET', `/api/v1/fleets/embedded/history?${q}`);
  expect(r.status).toBe(200);
  const lines = String(r.json).split('\n').filter((l) => l.trim() !== '');
  // The first line is the export's header (export.rs), the rest one event each.
  expect(JSON.parse(lines[0]).lockscope_history).toBe(1);
  const events = lines.slice(1).map((l) => JSON.parse(l));
  expect(events.every((e) => e.kind === 'wait_started')).toBe(true);
  expect(events.length, `page ${n}, export ${events.length} for ${from} – ${to}`).toBe(n);
  console.log(`waits started ${from} – ${to}: page ${n}, export ${events.length}`);

  // The summary and the drill-down links are there; the charts carry their units.
  // Counter totals need two samples (2.5 s apart) in the window: on a server
  // that started moments ago (and a loaded machine) the page says "no samples"
  // until its next refresh (every 5 s) brings them.
  await expect(page.getByTestId('total-acquired')).toHaveText(/^\d+$/, { timeout: 15_000 });
  await expect(page.getByTestId('chart-acquisitions')).toContainText('acquisitions/s');
  await expect(page.getByTestId('chart-wait')).toContainText('wait (ms)');
  // The most contended lock opens its waits in the history over the same window.
  expect(top).toContain(`&from=${encodeURIComponent(from)}&to=${encodeURIComponent(to)}&kind=wait_started`);
  await page.setViewportSize({ width: 1280, height: 900 });
  await shot(page, '5m');

  // Hovering a chart shows the bucket's values.
  const box = (await page.locator('[data-testid="chart-acquisitions"] svg').first().boundingBox())!;
  await page.mouse.move(box.x + box.width * 0.7, box.y + box.height * 0.5);
  await expect(page.locator('._chartistry_tooltip').first()).toContainText('UTC');
  await page.locator('[data-testid="chart-acquisitions"]').screenshot({ path: 'test-results/screens/charts-tooltip.png' });
  expect(errors).toEqual([]);
});

test('the page updates by itself', async ({ page }) => {
  await open(page, '/charts?fleet=embedded&window=5m');
  const status = page.getByTestId('charts-status');
  await expect(status).toContainText(/^updated \d\d:\d\d:\d\d UTC \(\d+s ago\)/);
  const first = (await status.textContent())!.match(/updated (\d\d:\d\d:\d\d)/)![1];
  const to = await page.getByTestId('charts-window').getAttribute('data-to');
  // 5 min windows are asked again every 5 s.
  await expect(status).not.toContainText(`updated ${first}`, { timeout: 15_000 });
  await expect(status).toHaveAttribute('data-state', 'live');
  await expect(page.getByTestId('charts-window')).not.toHaveAttribute('data-to', to!);
});

test('the window picker switches to an hour', async ({ page }) => {
  await open(page, '/charts?fleet=embedded&window=5m');
  await page.getByTestId('window-1h').click();
  await expect(page).toHaveURL(/[?&]window=1h/);
  await expect(page.getByTestId('window-1h')).toHaveAttribute('aria-current', 'page');
  await expect(page.getByTestId('window-5m')).not.toHaveAttribute('aria-current', 'page');
  await expect(page.getByTestId('charts-window')).toContainText('last 1 h');
  const { from, to } = await shown(page);
  expect(Date.parse(to) - Date.parse(from)).toBeGreaterThan(59 * 60_000);
  await expect(page.getByTestId('charts-status')).toContainText('asks again every 15s');
  await page.setViewportSize({ width: 1280, height: 900 });
  await shot(page, '1h');
});

test('at 390 px nothing is wider than the screen', async ({ page }) => {
  await page.setViewportSize({ width: 390, height: 800 });
  await open(page, '/charts?fleet=embedded&window=5m');
  const width = await page.evaluate(() => document.documentElement.scrollWidth);
  expect(width).toBeLessThanOrEqual(390);
  const svg = (await page.locator('[data-testid="chart-wait"] svg').first().boundingBox())!;
  expect(svg.width).toBeLessThanOrEqual(390);
  await shot(page, 'narrow');
  await page.getByTestId('chart-conflicts').screenshot({ path: 'test-results/screens/charts-narrow-conflicts.png' });
});
