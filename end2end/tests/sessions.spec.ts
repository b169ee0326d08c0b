import { expect, Page, test } from '@playwright/test';
import { Stack } from './stack';

// Sessions and liveness on the embedded default (SQLite + the demo fleet, whose
// workers each have their own session, host and pid, and sometimes die holding
// a lock). Screenshots of each screen go to end2end/test-results/screens/.
test.describe.configure({ mode: 'serial' });

let stack: Stack;
test.beforeAll(async () => {
  stack = await Stack.startEmbedded();
});
test.afterAll(async () => {
  await stack?.stop();
});

const indicator = (page: Page) => page.getByTestId('connection');
const shot = (page: Page, name: string) =>
  page.screenshot({ path: `test-results/screens/${name}.png`, fullPage: true });

/** The demo's session ttl and heartbeat interval (the client library's defaults). */
const SESSION_TTL_MS = 10_000;
const HEARTBEAT_MS = 2_000;

test('a demo worker that dies holding a lock shows as orphaned within its session ttl plus 5 s', async ({ page }) => {
  test.setTimeout(150_000);
  await page.goto(`${stack.url}/?state=orphaned`);
  await expect(indicator(page)).toHaveAttribute('data-state', 'live');
  const orphaned = page.locator('[data-testid="lock-row"][data-state="orphaned"]');
  const before = new Set(await orphaned.evaluateAll((rows) => rows.map((r) => r.getAttribute('data-lock'))));
  // Wait for a lock to turn orphaned while we watch (a demo worker dies every
  // few seconds to a minute).
  let name: string | null = null;
  const deadline = Date.now() + 120_000;
  while (!name && Date.now() < deadline) {
    const now = await orphaned.evaluateAll((rows) => rows.map((r) => r.getAttribute('data-lock')));
    name = now.find((n) => n && !before.has(n)) ?? null;
    if (!name) await page.waitForTimeout(100);
  }
  expect(name, 'a demo lock turned orphaned within 2 minutes').not.toBeNull();
  const seenAt = Date.now();
  await expect(page.getByTestId('state').first()).toContainText('orphaned');
  await shot(page, 'locks-orphaned');

  // Its detail page: the holder's session is gone; the record's last heartbeat
  // is when the worker was last alive.
  await page.goto(`${stack.url}/lock?fleet=embedded&name=${encodeURIComponent(name!)}`);
  await expect(page.getByTestId('detail-state')).toHaveAttribute('data-state', 'orphaned');
  await expect(page.getByTestId('detail-session')).toHaveAttribute('data-state', 'gone');
  const lastBeat = await page.locator('time').nth(1).getAttribute('datetime');
  const silentMs = seenAt - Date.parse(lastBeat!);
  console.log(`orphaned ${silentMs} ms after the holder's last heartbeat (ttl ${SESSION_TTL_MS} ms)`);
  // Death is at most one heartbeat interval after the last heartbeat.
  expect(silentMs).toBeLessThanOrEqual(SESSION_TTL_MS + HEARTBEAT_MS + 5_000);
  await shot(page, 'detail-orphaned');
});

test('the sessions page lists every demo worker with a last-seen heartbeat that moves', async ({ page }) => {
  await page.goto(`${stack.url}/sessions?fleet=embedded`);
  await expect(indicator(page)).toHaveAttribute('data-state', 'live');
  const alive = page.locator('[data-testid="session-row"][data-state="alive"]');
  await expect.poll(() => alive.count(), { timeout: 10_000 }).toBeGreaterThanOrEqual(10);
  // Each worker is its own process on its own host: not the dashboard's pid.
  const who = await alive.locator('td.who .where').allTextContents();
  expect(who.every((w) => /@[a-z-]+-\d\d\.demo:\d+$/.test(w)), who.join(', ')).toBe(true);
  expect(new Set(who).size, 'distinct host:pid per session').toBe(who.length);
  // The age itself may read "0s ago" throughout (each heartbeat is seen as it
  // is written); the instant it was last seen is what moves.
  const age = alive.first().getByTestId('heartbeat-age');
  await expect(age).toHaveText(/^\d+[smhd].* ago$/);
  const seen = async () => /last heartbeat seen (.+?) \(/.exec((await age.getAttribute('title')) ?? '')?.[1];
  const first = await seen();
  expect(first, 'the title names when the heartbeat was last seen').toBeTruthy();
  await expect.poll(seen, { timeout: 5_000 }).not.toBe(first);
  await shot(page, 'sessions');
});

test("a hot lock's detail page shows its backtrace and its waiters, live", async ({ page }) => {
  test.setTimeout(90_000);
  const name = 'demo/payments/settlement-eu';
  await page.goto(`${stack.url}/lock?fleet=embedded&name=${encodeURIComponent(name)}`);
  await expect(indicator(page)).toHaveAttribute('data-state', 'live');
  await expect(page.getByTestId('detail-name')).toHaveText(name);
  // Hot: held and waited for most of the time; the page follows it live.
  await expect(page.getByTestId('detail-waiter').first()).toBeVisible({ timeout: 60_000 });
  const frames = page.locator('[data-testid="detail-backtrace"] li');
  await expect(frames.first()).toBeVisible();
  // Trimmed: the innermost frame is the demo's code, not the runtime's.
  await expect(frames.first()).toContainText('lockscope::cli::demo');
  await expect(page.getByTestId('waited').first()).toContainText(/\d+s/);
  await shot(page, 'detail-waiters');
});

test('`lockscope lock --store sqlite:…` and `unlock` act on the embedded default while it is shown', async ({ page }) => {
  await page.goto(`${stack.url}/?prefix=cli/`);
  await expect(indicator(page)).toHaveAttribute('data-state', 'live');
  const fence = await stack.lock('cli/by-hand', 'taken from the shell', 60, `sqlite:${stack.embeddedDb}`);
  const row = page.locator('[data-testid="lock-row"][data-lock="cli/by-hand"]');
  await expect(row).toBeVisible({ timeout: 3_000 });
  await expect(row).toContainText('taken from the shell');
  await expect(row.getByTestId('fence')).toHaveText(String(fence));
  await stack.unlock('cli/by-hand', fence, `sqlite:${stack.embeddedDb}`);
  await expect(row).toHaveCount(0, { timeout: 3_000 });
});

test('the page works at 390 px without sideways scrolling, and the tab title counts what needs attention', async ({
  browser,
}) => {
  const context = await browser.newContext({ viewport: { width: 390, height: 844 } });
  const page = await context.newPage();
  for (const path of ['/', '/sessions?fleet=embedded', '/lock?fleet=embedded&name=demo%2Fbilling%2Finvoice-run']) {
    await page.goto(stack.url + path);
    await expect(indicator(page)).toHaveAttribute('data-state', 'live');
    const [scrollWidth, clientWidth] = await page.evaluate(() => [
      document.documentElement.scrollWidth,
      document.documentElement.clientWidth,
    ]);
    expect(scrollWidth, `${path} scrolls sideways`).toBeLessThanOrEqual(clientWidth);
    await shot(page, `narrow${path.replace(/[^a-z]+/g, '-')}`);
  }
  await page.goto(stack.url);
  await expect(indicator(page)).toHaveAttribute('data-state', 'live');
  await expect(page).toHaveTitle(/embedded — lockscope$/);
  await expect
    .poll(async () => {
      const title = await page.title();
      const attention = Number((/^\((\d+) need attention\)/.exec(title) ?? [])[1] ?? 0);
      const counted = await page.evaluate(() =>
        ['expired', 'orphaned', 'blacklisted', 'overdue', 'malformed']
          .map((s) => Number(document.querySelector(`[data-fleet="embedded"] [data-testid="fleet-${s}"]`)?.textContent ?? 0))
          .reduce((a, b) => a + b, 0),
      );
      return attention === counted;
    }, { timeout: 10_000 })
    .toBe(true);
  expect(await page.locator('link[rel="icon"]').getAttribute('href')).toBe('/favicon.svg');
  expect((await page.request.get(`${stack.url}/favicon.svg`)).status()).toBe(200);
  await context.close();
});
