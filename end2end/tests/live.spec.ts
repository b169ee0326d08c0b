import { expect, Page, test } from '@playwright/test';
import { Stack } from './stack';

// One etcd and one server for the file; the tests share them and run in order.
test.describe.configure({ mode: 'serial' });

let stack: Stack;
test.beforeAll(async () => {
  stack = await Stack.start();
});
test.afterAll(async () => {
  await stack?.stop();
});

const row = (page: Page, name: string) => page.locator(`[data-testid="lock-row"][data-lock="${name}"]`);
const indicator = (page: Page) => page.getByTestId('connection');

test('the server-rendered page is complete without JavaScript', async ({ browser }) => {
  await stack.lock('static/visible', 'seen without javascript');
  const context = await browser.newContext({ javaScriptEnabled: false });
  const page = await context.newPage();
  await page.goto(stack.url);
  await expect(row(page, 'static/visible')).toContainText('seen without javascript');
  await expect(indicator(page)).toHaveAttribute('data-state', 'static');
  await context.close();
});

test('locks appear and disappear live, one row at a time', async ({ page }) => {
  const consoleErrors: string[] = [];
  page.on('console', (m) => m.type() === 'error' && consoleErrors.push(m.text()));
  page.on('pageerror', (e) => consoleErrors.push(String(e)));
  await page.goto(stack.url);
  await expect(indicator(page)).toHaveAttribute('data-state', 'live');
  await expect(row(page, 'static/visible')).toBeVisible();

  // Mark the existing row's DOM node: a keyed list must keep it as other rows come and go.
  await row(page, 'static/visible').evaluate((el) => ((el as any).__kept = true));

  const started = Date.now();
  const fence = await stack.lock('e2e/alpha', 'browser test');
  await expect(row(page, 'e2e/alpha')).toBeVisible({ timeout: 2_000 });
  const latency = Date.now() - started;
  await expect(row(page, 'e2e/alpha').getByTestId('fence')).toHaveText(String(fence));
  await expect(row(page, 'e2e/alpha')).toContainText('browser test');
  await expect(row(page, 'e2e/alpha')).toContainText('e2e@');
  console.log(`store->browser: lock CLI start to row visible in ${latency} ms`);

  await stack.unlock('e2e/alpha', fence);
  await expect(row(page, 'e2e/alpha')).toHaveCount(0, { timeout: 2_000 });
  expect(await row(page, 'static/visible').evaluate((el) => (el as any).__kept)).toBe(true);

  // The countdown is live: "expires in" changes without any store event.
  const before = await row(page, 'static/visible').getByTestId('expires-in').textContent();
  await expect(row(page, 'static/visible').getByTestId('expires-in')).not.toHaveText(before!, { timeout: 3_000 });
  expect(consoleErrors).toEqual([]);
});

test('a store outage is shown, and recovery shows the current truth', async ({ page }) => {
  const survivorFence = await stack.lock('outage/survivor', 'held through the outage');
  const goneFence = await stack.lock('outage/released-meanwhile', 'released while the dashboard was cut off');
  await page.goto(stack.url);
  await expect(indicator(page)).toHaveAttribute('data-state', 'live');
  await expect(row(page, 'outage/released-meanwhile')).toBeVisible();

  await stack.stopEtcd();
  await expect(indicator(page)).toHaveAttribute('data-state', 'store-unreachable', { timeout: 10_000 });
  await expect(indicator(page)).toContainText('store unreachable since');
  // The last known table stays on screen.
  await expect(row(page, 'outage/survivor')).toBeVisible();
  // Let the dashboard's reconnect backoff grow so the changes below happen
  // before it is back.
  await page.waitForTimeout(3_000);

  await stack.startEtcd();
  await stack.unlock('outage/released-meanwhile', goneFence);
  const takenFence = await stack.lock('outage/taken-while-down', 'taken while the dashboard was cut off');

  await expect(indicator(page)).toHaveAttribute('data-state', 'live', { timeout: 15_000 });
  await expect(row(page, 'outage/taken-while-down').getByTestId('fence')).toHaveText(String(takenFence));
  await expect(row(page, 'outage/released-meanwhile')).toHaveCount(0);
  await expect(row(page, 'outage/survivor').getByTestId('fence')).toHaveText(String(survivorFence));
});

test('every liveness state is a word with an icon, and the detail page says why', async ({ page }) => {
  test.setTimeout(60_000);
  const state = (name: string) => row(page, name).getByTestId('state');
  await page.goto(`${stack.url}/?prefix=states/`);
  await expect(indicator(page)).toHaveAttribute('data-state', 'live');

  await stack.lockHeld('states/healthy', 'within its expected runtime', 600);
  await stack.lockHeld('states/overdue-then-expired', 'expected runtime 0', 0);
  const banned = await stack.lockHeld('states/blacklisted', 'its session is banned', 600);
  await stack.etcdPut(
    `blacklist/${banned.session}`,
    JSON.stringify({ v: 1, session: banned.session, by: 'e2e', reason: 'testing the state', at: Date.now() }),
  );
  await stack.etcdPut('locks/states/malformed', 'not a lock record');
  await expect(state('states/healthy')).toHaveText('✓healthy');
  await expect(state('states/overdue-then-expired')).toHaveText('⚠overdue');
  await expect(state('states/blacklisted')).toHaveText('⊘blacklisted');
  await expect(state('states/malformed')).toHaveText('✖malformed');
  await page.screenshot({ path: 'test-results/screens/states-early.png', fullPage: true });

  // The CLI's sessions stop heartbeating when it exits: gone after their 10 s
  // ttl, so the healthy lock turns orphaned; the one that expected to be done at
  // once expires (auto-unlock after three heartbeats, 6 s) first.
  await expect(state('states/overdue-then-expired')).toHaveText('‼expired', { timeout: 10_000 });
  await expect(state('states/healthy')).toHaveText('☠orphaned', { timeout: 20_000 });
  await expect(state('states/blacklisted')).toHaveText('⊘blacklisted');
  // Severity order: expired, orphaned, blacklisted, (overdue), malformed.
  const order = await page
    .locator('[data-testid="lock-row"]')
    .evaluateAll((rows) => rows.map((r) => r.getAttribute('data-state')));
  expect(order).toEqual(['expired', 'orphaned', 'blacklisted', 'malformed']);
  await page.screenshot({ path: 'test-results/screens/states-late.png', fullPage: true });

  for (const [name, word] of [
    ['states/blacklisted', 'blacklisted'],
    ['states/healthy', 'orphaned'],
    ['states/malformed', 'malformed'],
  ]) {
    await page.goto(`${stack.url}/lock?fleet=e2e-fleet&name=${encodeURIComponent(name)}`);
    await expect(page.getByTestId('detail-state')).toHaveAttribute('data-state', word);
    await expect(page.getByTestId('detail-reason')).not.toBeEmpty();
    await page.screenshot({ path: `test-results/screens/detail-${word}.png`, fullPage: true });
  }
  await expect(page.getByTestId('detail-raw')).toHaveText('not a lock record');
});
