import { expect, test } from '@playwright/test';
import { Stack } from './stack';

// The embedded default runs its unlocker (on by default there): a lock a dead
// demo worker left behind is released once its auto_unlock_at plus the grace
// margin has passed, the overview says which replica is the active unlocker,
// and the release is in the audit log as the unlocker's.
test.describe.configure({ mode: 'serial' });

// Under a prefix of its own, so the server's built-in demo fleet never contends
// for it (nor leaves a dead holder of its own on it).
const LOCK = 'dying/payments/settlement-eu';
const GRACE_SECS = 2;

let stack: Stack;
test.beforeAll(async () => {
  stack = await Stack.startEmbedded(['--unlocker-grace-secs', String(GRACE_SECS)]);
  // A demo worker that dies holding every lock it takes.
  stack.spawnDemo([
    '--name-prefix', 'dying/', '--workers', '1', '--keys', '1', '--hot-keys', '1', '--die-rate', '1', '--stall-rate', '0', '--hang-rate', '0',
    '--expected-runtime-ms', '1000', '--auto-unlock-ms', '6000',
  ]);
});
test.afterAll(async () => {
  await stack?.stop();
});

test("a dead demo worker's lock is released after its auto-unlock time plus grace, by the active unlocker", async ({
  page,
}) => {
  test.setTimeout(90_000);
  await page.goto(`${stack.url}/`);
  const cell = page.locator('[data-testid="fleet-row"][data-fleet="embedded"] [data-testid="fleet-unlocker"]');
  await expect(cell).toHaveAttribute('data-mode', 'on');
  await expect(cell).toHaveAttribute('data-leading', 'true', { timeout: 10_000 });
  await expect(cell).toContainText('active here');

  // The dying worker's acquisition, read through the API.
  const taken = await stack.heldLock(LOCK);
  const held = { fence: taken.fence as number, autoUnlockAt: taken.body.auto_unlock_at as number };
  const deadline = Date.now() + 60_000;
  await page.goto(`${stack.url}/lock?fleet=embedded&name=${encodeURIComponent(LOCK)}`);
  await expect(page.getByTestId('detail-fence')).toHaveText(String(held.fence));

  // Follow it until it is gone: its auto_unlock_at moves while the worker
  // heartbeats, and stays once it died; the last value seen is the one due.
  let goneAt = 0;
  while (!goneAt && Date.now() < deadline + 30_000) {
    const r = await stack.api('GET', `/api/v1/fleets/embedded/locks/${encodeURIComponent(LOCK)}`);
    if (r.status === 200 && r.json.entry.fence === held.fence) {
      held.autoUnlockAt = r.json.entry.body.auto_unlock_at;
      await page.waitForTimeout(50);
    } else {
      goneAt = Date.now();
    }
  }
  const due = held.autoUnlockAt + GRACE_SECS * 1000;
  expect(goneAt, 'released').toBeGreaterThan(0);
  expect(goneAt, 'never released before auto_unlock_at + grace').toBeGreaterThanOrEqual(due);
  // The page followed: that acquisition is gone from it.
  await expect(page.getByTestId('detail-fence').or(page.getByTestId('detail-free'))).not.toHaveText(
    String(held.fence),
  );

  // On record, as the unlocker's, with that fence.
  const audit = await stack.api('GET', '/api/v1/audit?action=release');
  const entry = audit.json.find((e: { fence: number; target: string }) => e.fence === held.fence && e.target === LOCK);
  expect(entry, JSON.stringify(audit.json)).toBeDefined();
  expect(entry.actor).toMatch(/^unlocker@/);
  expect(entry.outcome).toBe('done');
  expect(entry.at).toBeGreaterThanOrEqual(due);
  expect(entry.at).toBeLessThanOrEqual(due + 2_000);
  await page.goto(`${stack.url}/`);
  await expect(cell).toContainText(/released [1-9]/);
  await page.screenshot({ path: 'test-results/screens/unlocker-overview.png', fullPage: true });
});
