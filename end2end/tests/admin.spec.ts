import { expect, Page, test } from '@playwright/test';
import { HUNG_LOCK, signIn, Stack } from './stack';

// The admin console on the embedded default (SQLite + the demo fleet) with
// authentication: an operator blacklists a hung demo worker, watches its lock
// stop being extended and run out, force-releases it, and an admin finds both
// actions in the audit log; a viewer gets no buttons and the API refuses them.
// Screenshots go to end2end/test-results/screens/.
test.describe.configure({ mode: 'serial' });

const LOCK = HUNG_LOCK;
const LOCK_PAGE = `/lock?fleet=embedded&name=${encodeURIComponent(LOCK)}`;

let stack: Stack;
test.beforeAll(async () => {
  // The embedded unlocker would release the blacklisted lock 15 s after it
  // turns expired; here the operator does, so give it time.
  stack = await Stack.startEmbeddedWithAuth(
    [
      ['op', 'operator'],
      ['boss', 'admin'],
      ['eve', 'viewer'],
    ],
    ['--unlocker-grace-secs', '300'],
  );
  stack.spawnHungWorker(6000);
});
test.afterAll(async () => {
  await stack?.stop();
});

const shot = (page: Page, name: string) =>
  page.screenshot({ path: `test-results/screens/${name}.png`, fullPage: true });

async function signOut(page: Page) {
  await page.getByTestId('signout').click();
  await expect(page).toHaveURL(/\/signin/);
}

/** The instant the detail page shows for `label` (its `datetime`). */
const detailTime = (page: Page, label: string) =>
  page.locator('section.record dt', { hasText: label }).locator('xpath=following-sibling::dd[1]/time').getAttribute('datetime');

test('an operator blacklists a hung worker, sees its lock run out, force-releases it; an admin finds both in the audit log', async ({
  page,
}) => {
  test.setTimeout(120_000);
  const hung = await stack.hungLock('eve');
  await signIn(page, stack, 'op', LOCK_PAGE);
  await expect(page.getByTestId('no-auth-banner')).toHaveCount(0);
  await expect(page.getByTestId('detail-fence')).toHaveText(String(hung.fence));
  await expect(page.getByTestId('detail-state')).toHaveAttribute('data-state', 'overdue');

  // The release dialog says the holder is alive and offers blacklisting first.
  const dialog = page.getByTestId('release-dialog');
  await dialog.locator('summary').click();
  await expect(dialog.getByTestId('release-alive')).toBeVisible();
  await expect(dialog.getByTestId('release-fence')).toContainText(String(hung.fence));
  await shot(page, 'admin-release-dialog-alive');
  const blacklist = dialog.getByTestId('blacklist-form');
  await blacklist.getByTestId('blacklist-reason').fill('hung for minutes, blocking settlement');
  await blacklist.getByTestId('blacklist-submit').click();
  await expect(page.getByTestId('notice')).toHaveAttribute('data-outcome', 'done');
  await expect(page.getByTestId('notice')).toContainText(hung.session);
  await expect(page.getByTestId('detail-session')).toHaveAttribute('data-state', 'blacklisted');

  // Its lock is no longer extended: auto-unlock stays put, then it turns expired.
  const autoUnlock = await detailTime(page, 'auto-unlock at');
  await page.waitForTimeout(3_000); // more than one heartbeat interval (2 s)
  expect(await detailTime(page, 'auto-unlock at')).toBe(autoUnlock);
  await expect(page.getByTestId('detail-state')).toHaveAttribute('data-state', 'expired', { timeout: 15_000 });
  await expect(page.getByTestId('detail-fence')).toHaveText(String(hung.fence));
  await shot(page, 'admin-expired');

  // Force-release it: a reason and the lock's name typed again.
  await dialog.locator('summary').click();
  await expect(dialog.getByTestId('release-alive')).toHaveCount(0);
  await dialog.getByTestId('release-reason').fill('blacklisted holder ran out; freeing settlement');
  await dialog.getByTestId('release-confirm').fill(LOCK);
  await dialog.getByTestId('release-submit').click();
  await expect(page.getByTestId('notice')).toHaveAttribute('data-outcome', 'done');
  await expect(page.getByTestId('notice')).toContainText(`fence ${hung.fence}`);
  // The embedded demo's workers take the lock again at once: a newer fence, or free.
  await expect(page.getByTestId('detail-fence').or(page.getByTestId('detail-free'))).not.toHaveText(
    String(hung.fence),
  );
  await shot(page, 'admin-released');
  // An operator does not read the audit log.
  await expect(page.getByTestId('nav-audit')).toHaveCount(0);
  await signOut(page);

  // The admin finds both actions, attributed to the operator.
  await signIn(page, stack, 'boss', '/audit?actor=op');
  const rows = page.getByTestId('audit-row');
  await expect(rows).toHaveCount(2);
  await expect(rows.nth(0)).toHaveAttribute('data-action', 'release');
  await expect(rows.nth(0)).toHaveAttribute('data-outcome', 'done');
  await expect(rows.nth(0)).toContainText(LOCK);
  await expect(rows.nth(0)).toContainText('blacklisted holder ran out');
  await expect(rows.nth(1)).toHaveAttribute('data-action', 'blacklist');
  await expect(rows.nth(1)).toContainText(hung.session);
  await shot(page, 'admin-audit');
  const csv = await page.request.get(
    `${stack.url}${await page.getByTestId('audit-export-csv').getAttribute('href')}`,
  );
  expect(csv.status()).toBe(200);
  expect((await csv.text()).split('\n').filter((l) => l.includes(',op,')).length).toBe(2);
  await page.setViewportSize({ width: 390, height: 844 });
  await shot(page, 'admin-audit-390');
});

test('a viewer sees no action buttons and the API refuses them', async ({ page }) => {
  await signIn(page, stack, 'eve', LOCK_PAGE);
  await expect(page.getByTestId('whoami')).toHaveAttribute('data-role', 'viewer');
  await expect(page.getByTestId('detail-state')).toBeVisible();
  await expect(page.getByTestId('release-dialog')).toHaveCount(0);
  await expect(page.getByTestId('blacklist-form')).toHaveCount(0);
  await page.goto(`${stack.url}/sessions?fleet=embedded`);
  await expect(page.getByTestId('session-row').first()).toBeVisible();
  await expect(page.getByTestId('blacklist-form')).toHaveCount(0);
  await expect(page.getByTestId('unblacklist-form')).toHaveCount(0);
  await page.goto(`${stack.url}/audit`);
  await expect(page.locator('body')).toContainText('reading the audit log needs the admin role');

  const lock = await stack.api('GET', `/api/v1/fleets/embedded/locks/${encodeURIComponent(LOCK)}`, 'eve');
  if (lock.status === 200) {
    const fence = lock.json.entry.fence;
    const r = await stack.api('POST', `/api/v1/fleets/embedded/locks/${encodeURIComponent(LOCK)}/release`, 'eve', {
      fence,
      reason: 'viewer tries',
    });
    expect(r.status).toBe(403);
    expect(r.json.detail).toContain('needs the operator role');
  }
  const session = await stack.api('GET', '/api/v1/fleets/embedded/sessions', 'eve');
  const id = session.json.rows.find((row: { blacklist: unknown }) => !row.blacklist).id;
  const r = await stack.api('POST', `/api/v1/fleets/embedded/sessions/${id}/blacklist`, 'eve', { reason: 'viewer tries' });
  expect(r.status).toBe(403);
  const after = await stack.api('GET', '/api/v1/fleets/embedded/sessions', 'eve');
  expect(after.json.rows.find((row: { id: string }) => row.id === id)?.blacklist ?? null).toBeNull();
  // Both refusals are in the audit log, as the viewer's.
  const audit = await stack.api('GET', '/api/v1/audit?actor=eve', 'boss');
  expect(audit.json.map((e: { outcome: string }) => e.outcome)).toEqual(
    lock.status === 200 ? ['refused', 'refused'] : ['refused'],
  );
});
