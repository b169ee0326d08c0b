import { expect, Page, test } from '@playwright/test';
import { Stack } from './stack';

// A fleet of 100,000 locks in a real etcd: the page carries one window, stays
// live, and scrolling and filtering go through the server's views.
test.describe.configure({ mode: 'serial' });

const LOCKS = 100_000;
let stack: Stack;
test.beforeAll(async () => {
  test.setTimeout(240_000);
  stack = await Stack.startFilled(LOCKS);
});
test.afterAll(async () => {
  await stack?.stop();
});

const row = (page: Page, name: string) => page.locator(`[data-testid="lock-row"][data-lock="${name}"]`);
const rows = (page: Page) => page.locator('[data-testid="lock-row"]');
const indicator = (page: Page) => page.getByTestId('connection');
const total = (page: Page) => page.getByTestId('view-total');

test('100,000 locks: the page is one window, and live within 5 s', async ({ page }) => {
  const started = Date.now();
  const response = await page.goto(stack.url);
  const html = await response!.text();
  await expect(indicator(page)).toHaveAttribute('data-state', 'live', { timeout: 5_000 });
  console.log(`100k locks: live ${Date.now() - started} ms after navigation; page ${html.length} bytes`);
  expect(html.length, 'the page does not grow with the fleet').toBeLessThan(300_000);
  await expect(total(page)).toHaveText(String(LOCKS));
  expect(await rows(page).count()).toBeLessThanOrEqual(500);
});

// docs/architecture.md: "The first window is 40 rows unless the URL says", "A
// screen taller than the first window asks for the rows it shows as soon as the page
// is live, not at its first scroll", and "the window's size the screen chose is not"
// in the URL.
test('a tall screen gets the rows it shows once live, beyond the first window', async ({ page }) => {
  await page.setViewportSize({ width: 1280, height: 2400 });
  const response = await page.goto(`${stack.url}/?sort=name`);
  const html = await response!.text();
  expect(html.match(/data-testid="lock-row"/g)?.length, 'the first window').toBe(40);
  await expect(indicator(page)).toHaveAttribute('data-state', 'live');
  // The scroller is the viewport less 300 px: 2,100 px, 59 rows of 36 px, all shown.
  const shows = await page.getByTestId('scroller').evaluate((el) => Math.ceil(el.clientHeight / 36));
  expect(shows).toBeGreaterThan(40);
  await expect.poll(() => rows(page).count(), { timeout: 5_000 }).toBeGreaterThanOrEqual(shows);
  // Rewritten by the page (it names the fleet), without the window's size.
  await expect(page).toHaveURL(/fleet=.*sort=name/);
  expect(page.url()).not.toContain('limit=');
});

// docs/architecture.md: "Filter, sort and position are in the URL." A page opened deep
// in a view scrolls there once live and stays: the window it then asks for is around
// that position, not around the top (the scroller's first rows).
test('a page opened deep in a view is shown there once live, and stays', async ({ page }) => {
  const response = await page.goto(`${stack.url}/?sort=name&offset=50000`);
  const first = (await response!.text()).match(/data-testid="lock-row" data-lock="([^"]+)"/)![1];
  await expect(indicator(page)).toHaveAttribute('data-state', 'live');
  const scroller = page.getByTestId('scroller');
  await expect.poll(() => scroller.evaluate((el) => el.scrollTop)).toBe(50_000 * 36);
  await expect(page).toHaveURL(/offset=(4\d{4}|50000)\b/);
  await expect(row(page, first)).toBeInViewport();
});

test('a lock taken at the top of the default view appears without reload', async ({ page }) => {
  await page.goto(stack.url);
  await expect(indicator(page)).toHaveAttribute('data-state', 'live');
  // Expected runtime 0: overdue at once, so it sorts above every healthy lock
  // (the filled fleet's holders are live sessions).
  const fence = await stack.lock('aaa/stuck-now', 'stuck on purpose', 0);
  await expect(row(page, 'aaa/stuck-now')).toBeVisible({ timeout: 2_000 });
  await expect(rows(page).first()).toHaveAttribute('data-lock', 'aaa/stuck-now');
  await expect(row(page, 'aaa/stuck-now').getByTestId('state')).toContainText('overdue');
  await expect(total(page)).toHaveText(String(LOCKS + 1));
  await stack.unlock('aaa/stuck-now', fence);
  await expect(row(page, 'aaa/stuck-now')).toHaveCount(0, { timeout: 2_000 });
});

test('scrolling to the end shows the last lock by name', async ({ page }) => {
  const fence = await stack.lock('zzzz/last-by-name', 'the last name');
  await page.goto(`${stack.url}/?sort=name`);
  await expect(indicator(page)).toHaveAttribute('data-state', 'live');
  await expect(row(page, 'zzzz/last-by-name')).toHaveCount(0);
  await page.getByTestId('scroller').evaluate((el) => (el.scrollTop = el.scrollHeight));
  await expect(row(page, 'zzzz/last-by-name')).toBeVisible({ timeout: 5_000 });
  await expect(rows(page).last()).toHaveAttribute('data-lock', 'zzzz/last-by-name');
  await expect(page).toHaveURL(/offset=\d{5,}/);
  await stack.unlock('zzzz/last-by-name', fence);
});

test('a filter by service narrows the count to the right number', async ({ page }) => {
  await page.goto(stack.url);
  await expect(indicator(page)).toHaveAttribute('data-state', 'live');
  const chip = page.locator('[data-testid="service-count"]').first();
  const service = (await chip.getAttribute('data-service'))!;
  const expected = await stack.countService(service);
  await expect(chip.locator('b')).toHaveText(String(expected));
  await page.getByTestId('filter-service').fill(service);
  await page.getByTestId('filter-service').press('Enter');
  await expect(total(page)).toHaveText(String(expected), { timeout: 5_000 });
  expect(expected).toBeLessThan(LOCKS);
  await expect(page).toHaveURL(new RegExp(`service=${service}`));
  for (const holder of await page.locator('[data-testid="lock-row"] td.holder .where').allTextContents()) {
    expect(holder.startsWith(`${service}@`), holder).toBe(true);
  }
});

test('bench smoke: every row on screen ends with the last change written to it', async ({ page }) => {
  await page.goto(`${stack.url}/?prefix=svc-0/&sort=name`);
  await expect(indicator(page)).toHaveAttribute('data-state', 'live');
  // 300 changes/s for 2 s, half of them to the rows this view shows first.
  const log = await stack.benchLoad(LOCKS, 300, 2, 0.5);
  const last = new Map<string, string>();
  for (const line of log.trim().split('\n')) {
    const [name, , n] = line.split(' ');
    last.set(name, n);
  }
  const shownLast = async () => {
    const rows = await page.locator('[data-testid="lock-row"]').evaluateAll((trs) =>
      trs.map((tr) => [tr.getAttribute('data-lock')!, tr.querySelector('td.purpose')?.textContent ?? '']),
    );
    const written = rows.filter(([name]) => last.has(name));
    const stale = written.filter(([name, purpose]) => !purpose.endsWith(` n=${last.get(name)}`));
    return { written: written.length, stale: stale.map(([name]) => name) };
  };
  await expect.poll(async () => (await shownLast()).stale, { timeout: 5_000 }).toEqual([]);
  expect((await shownLast()).written, 'the load reached the rows on screen').toBeGreaterThan(20);
});
