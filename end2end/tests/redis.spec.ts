import { expect, test } from '@playwright/test';
import { Stack } from './stack';

// A Redis fleet (issue 27): a lock taken by `redis-cli SET k v NX PX 60000`
// (as redis-py, redsync and node-redlock take one) is in the live table and on
// its detail page (token, TTL, no waiters); the overview says the unlocker
// never acts here and when the fleet was last rescanned.
test.describe.configure({ mode: 'serial' });

let stack: Stack;
test.beforeAll(async () => {
  stack = await Stack.startRedis();
});
test.afterAll(async () => {
  await stack?.stop();
});

test('a SET NX PX lock is in the table, live, and on its detail page', async ({ page }) => {
  test.setTimeout(15_000);
  await page.goto(`${stack.url}/?fleet=cache`);
  await expect(page.getByTestId('connection')).toHaveAttribute('data-state', 'live');
  const row = page.locator('[data-testid="lock-row"][data-lock="jobs:nightly"]');
  await expect(row).toHaveCount(0);
  expect(await stack.redisCli('SET', 'jobs:nightly', 'tok-e2e', 'NX', 'PX', '60000')).toContain('OK');
  // Live: the row appears without a reload.
  await expect(row).toHaveCount(1, { timeout: 3_000 });
  await expect(row).toHaveAttribute('data-state', 'foreign');
  const fleet = page.locator('[data-testid="fleet-row"][data-fleet="cache"]');
  await expect(fleet.getByTestId('fleet-unlocker')).toHaveAttribute('data-mode', 'never');
  await expect(fleet.getByTestId('fleet-unlocker')).toContainText('never acts here');
  await expect(fleet.getByTestId('fleet-polled')).toContainText('rescanned every 30 s, last at');

  // Its fence is derived from the token (a number of up to 19 digits): the column cuts it
  // short, and the cell's title gives it whole.
  const fence = row.getByTestId('fence');
  const token = /^fencing token (\d+)$/.exec((await fence.getAttribute('title')) ?? '')?.[1];
  expect(token, 'the fence cell names the whole token').toBeTruthy();

  await page.goto(`${stack.url}/lock?fleet=cache&name=${encodeURIComponent('jobs:nightly')}`);
  await expect(page.getByTestId('detail-name')).toHaveText('jobs:nightly');
  await expect(page.getByTestId('detail-fence')).toHaveText(token!);
  await expect(page.getByTestId('detail-token')).toHaveText('tok-e2e');
  await expect(page.getByTestId('detail-ttl')).toContainText('s');
  await expect(page.locator('dd[data-testid="detail-no-waiters"]')).toContainText('this layout has none');
  await expect(page.getByTestId('detail-polled')).toContainText('rescanned every 30 s');
  // Deleted by hand: gone from the page, live.
  await stack.redisCli('DEL', 'jobs:nightly');
  await expect(page.getByTestId('detail-free')).toBeVisible({ timeout: 3_000 });
});
