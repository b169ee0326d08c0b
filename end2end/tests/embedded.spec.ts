import { expect, test } from '@playwright/test';
import { Stack } from './stack';

// `lockscope` with nothing configured: an embedded SQLite file and a demo fleet.
let stack: Stack;
test.beforeAll(async () => {
  stack = await Stack.startEmbedded();
});
test.afterAll(async () => {
  await stack?.stop();
});

test('with nothing configured, a live demo fleet runs on the embedded SQLite file', async ({ page }) => {
  await page.goto(stack.url);
  await expect(page.getByTestId('fleet')).toHaveText('embedded');
  await expect(page.getByTestId('source')).toContainText(stack.embeddedDb);
  await expect(page.getByTestId('connection')).toHaveAttribute('data-state', 'live');

  // Demo workers take and release locks: rows come and go without a reload.
  const names = () =>
    page.locator('[data-testid="lock-row"]').evaluateAll((rows) => rows.map((r) => r.getAttribute('data-lock')!));
  await expect(page.locator('[data-testid="lock-row"]').first()).toBeVisible({ timeout: 10_000 });
  const first = new Set(await names());
  const seen = new Set(first);
  const deadline = Date.now() + 15_000;
  let changed = false;
  while (!changed && Date.now() < deadline) {
    await page.waitForTimeout(250);
    const now = await names();
    now.forEach((n) => seen.add(n));
    changed = now.length !== first.size || now.some((n) => !first.has(n));
  }
  expect(changed, `the table changed live; seen: ${[...seen].join(', ')}`).toBe(true);

  const overview = page.locator('[data-testid="fleet-row"][data-fleet="embedded"]');
  await expect(overview.locator('td.state')).toHaveAttribute('data-state', 'live');
  // The overview's count for the fleet on screen is the table's own: read both in
  // one task (the DOM is consistent there) while the demo keeps changing rows.
  for (let i = 0; i < 20; i++) {
    const [rows, held] = await page.evaluate(() => [
      document.querySelectorAll('[data-testid="lock-row"]').length,
      document.querySelector('[data-fleet="embedded"] [data-testid="fleet-held"]')?.textContent,
    ]);
    expect(String(rows)).toBe(held);
    await page.waitForTimeout(100);
  }
});
