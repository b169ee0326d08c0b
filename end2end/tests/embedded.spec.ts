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
  await expect(page.locator('[data-testid="lock-row"]').first()).toBeVisible({ timeout: 10_000 });
  const seen = new Set<string>();
  const deadline = Date.now() + 15_000;
  while (seen.size < 4 && Date.now() < deadline) {
    for (const name of await page.locator('[data-testid="lock-row"]').evaluateAll((rows) => rows.map((r) => r.getAttribute('data-lock')!))) {
      seen.add(name);
    }
    await page.waitForTimeout(250);
  }
  expect(seen.size, `distinct locks seen live: ${[...seen].join(', ')}`).toBeGreaterThanOrEqual(4);
  const overview = page.locator('[data-testid="fleet-row"][data-fleet="embedded"]');
  await expect(overview).toBeVisible();
  await expect(overview.locator('td.state')).toHaveAttribute('data-state', 'live');
});
