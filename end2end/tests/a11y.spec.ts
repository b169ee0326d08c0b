import AxeBuilder from '@axe-core/playwright';
import { expect, Page, test } from '@playwright/test';
import { HUNG_LOCK, signIn, Stack } from './stack';

// The page for everyone (docs/operations.md, "Accessibility"): axe-core finds no
// serious or critical violation on any page, in either theme; the blacklist and
// force-release flows work with the keyboard alone, with focus always visible;
// the theme follows the system or the switch (remembered, applied before the
// first paint); absolute times are in UTC or the browser's zone, and say which.
test.describe.configure({ mode: 'serial' });

const LOCK = HUNG_LOCK;
const LOCK_PAGE = `/lock?fleet=embedded&name=${encodeURIComponent(LOCK)}`;

let stack: Stack;
test.beforeAll(async () => {
  stack = await Stack.startEmbeddedWithAuth(
    [
      ['boss', 'admin'],
      ['op', 'operator'],
    ],
    ['--unlocker-grace-secs', '300'],
  );
  stack.spawnHungWorker(60000);
});
test.afterAll(async () => {
  await stack?.stop();
});

/** The page once hydrated (the switches are enabled only then). */
async function hydrated(page: Page) {
  await expect(page.getByTestId('pref-theme')).toBeEnabled();
}

/** axe's serious and critical violations of the page as it is now, readable. */
async function violations(page: Page): Promise<string[]> {
  const { violations } = await new AxeBuilder({ page }).analyze();
  return violations
    .filter((v) => v.impact === 'serious' || v.impact === 'critical')
    .map((v) => `${v.id} (${v.impact}): ${v.help}\n  ${v.nodes.map((n) => n.target.join(' ')).slice(0, 5).join('\n  ')}`);
}

/** Presses Tab until `target` has focus (at most `max` times); every stop shows an outline. */
async function tabTo(page: Page, target: ReturnType<Page['locator']>, max = 60, shift = false) {
  await expect(target).toHaveCount(1);
  for (let i = 0; i < max; i++) {
    if (await target.evaluate((el) => el === document.activeElement)) return;
    await page.keyboard.press(shift ? 'Shift+Tab' : 'Tab');
    await expectVisibleFocus(page);
  }
  throw new Error(`Tab never reached ${target}`);
}

/** The focused element draws a :focus-visible outline (computed style). */
async function expectVisibleFocus(page: Page) {
  const style = await page.evaluate(() => {
    const el = document.activeElement;
    if (!el || el === document.body) return null;
    const s = getComputedStyle(el);
    return { visible: el.matches(':focus-visible'), style: s.outlineStyle, width: parseFloat(s.outlineWidth) };
  });
  if (style === null) return;
  expect(style.visible, 'keyboard focus matches :focus-visible').toBe(true);
  expect(style.style, 'a focused element draws an outline').not.toBe('none');
  expect(style.width).toBeGreaterThanOrEqual(2);
}

const focusedTestId = (page: Page) => page.evaluate(() => document.activeElement?.getAttribute('data-testid') ?? document.activeElement?.tagName);

test('axe finds no serious or critical violation on any page, in either theme', async ({ page, browser }) => {
  test.setTimeout(120_000);
  await stack.hungLock('boss');
  await signIn(page, stack, 'boss', '/');
  const pages: [string, string][] = [
    ['overview', '/?fleet=embedded'],
    ['lock detail', LOCK_PAGE],
    ['sessions', '/sessions?fleet=embedded'],
    ['history', `/history?fleet=embedded&lock=${encodeURIComponent(LOCK)}`],
    ['charts', '/charts?fleet=embedded'],
    ['audit', '/audit'],
  ];
  const found: string[] = [];
  // Each page once, checked in both themes (the media query switches in place).
  const both = async (p: Page, name: string) => {
    for (const scheme of ['dark', 'light'] as const) {
      await p.emulateMedia({ colorScheme: scheme });
      found.push(...(await violations(p)).map((v) => `${name} (${scheme}): ${v}`));
    }
  };
  for (const [name, path] of pages) {
    await page.goto(`${stack.url}${path}`);
    await hydrated(page);
    await both(page, name);
  }
  await page.goto(`${stack.url}${LOCK_PAGE}`);
  await hydrated(page);
  await page.getByTestId('release-dialog').locator('summary').click();
  await expect(page.getByTestId('release-form')).toBeVisible();
  await both(page, 'release dialog');
  // A stranger's page: the sign-in form.
  const strangers = await browser.newContext();
  const stranger = await strangers.newPage();
  await stranger.goto(`${stack.url}/signin`);
  await expect(stranger.getByTestId('signin-token')).toBeVisible();
  await both(stranger, 'sign-in');
  await strangers.close();
  expect(found, found.join('\n')).toEqual([]);
});

test('the blacklist and force-release flows work with the keyboard alone', async ({ page }) => {
  test.setTimeout(120_000);
  const hung = await stack.hungLock('boss');
  await signIn(page, stack, 'op', LOCK_PAGE);
  await hydrated(page);
  await expect(page.getByTestId('detail-fence')).toHaveText(String(hung.fence));
  const dialog = page.getByTestId('release-dialog');
  const summary = dialog.locator('summary');

  // Tab to the dialog's summary; Enter opens it and focus moves to its first field.
  await tabTo(page, summary);
  await page.keyboard.press('Enter');
  await expect(dialog).toHaveAttribute('open', '');
  await expect(dialog.getByTestId('release-alive')).toBeVisible();
  await expect.poll(() => focusedTestId(page)).toBe('blacklist-reason');
  await expectVisibleFocus(page);

  // Escape closes it and gives focus back to where it was opened from.
  await page.keyboard.press('Escape');
  await expect(dialog).not.toHaveAttribute('open', '');
  await expect(summary).toBeFocused();

  // Space opens it again; Tab stays inside it, round and round.
  await page.keyboard.press(' ');
  await expect(dialog).toHaveAttribute('open', '');
  await expect.poll(() => focusedTestId(page)).toBe('blacklist-reason');
  const stops = new Set<string>();
  for (let i = 0; i < 12; i++) {
    await page.keyboard.press('Tab');
    await expectVisibleFocus(page);
    expect(await page.evaluate(() => !!document.activeElement?.closest('[data-testid="release-dialog"]')), 'focus is trapped in the open dialog').toBe(true);
    stops.add(String(await focusedTestId(page)));
  }
  expect([...stops]).toEqual(expect.arrayContaining(['SUMMARY', 'blacklist-reason', 'blacklist-submit', 'release-reason', 'release-confirm', 'release-submit']));
  for (let i = 0; i < 8; i++) {
    await page.keyboard.press('Shift+Tab');
    expect(await page.evaluate(() => !!document.activeElement?.closest('[data-testid="release-dialog"]')), 'Shift+Tab is trapped too').toBe(true);
  }

  // Blacklist the alive holder first (the dialog recommends it): type a reason, Enter submits.
  await tabTo(page, dialog.getByTestId('blacklist-reason'), 20);
  await page.keyboard.type('hung; checked with the keyboard alone');
  await page.keyboard.press('Enter');
  await expect(page.getByTestId('notice')).toHaveAttribute('data-outcome', 'done');
  await expect(page.getByTestId('notice')).toContainText(`Blacklisted session ${hung.session}`);
  await expect(page.getByTestId('detail-session')).toHaveAttribute('data-state', 'blacklisted');
  await hydrated(page);

  // Force-release: reason, the name typed again, then the button with Space.
  await tabTo(page, summary);
  await page.keyboard.press('Enter');
  await expect.poll(() => focusedTestId(page)).toBe('release-reason');
  await page.keyboard.type('freed by keyboard');
  await page.keyboard.press('Tab');
  await expect.poll(() => focusedTestId(page)).toBe('release-confirm');
  await page.keyboard.type(LOCK);
  await page.keyboard.press('Tab');
  await expect.poll(() => focusedTestId(page)).toBe('release-submit');
  await expectVisibleFocus(page);
  await page.keyboard.press(' ');
  await expect(page.getByTestId('notice')).toHaveAttribute('data-outcome', 'done');
  await expect(page.getByTestId('notice')).toContainText(`Released fence ${hung.fence} of ${LOCK}`);

  // The sessions page's disclosure forms behave alike: blacklist another session there.
  await page.goto(`${stack.url}/sessions?fleet=embedded`);
  await hydrated(page);
  const other = await page
    .locator('[data-testid="session-row"]', { has: page.getByTestId('blacklist') })
    .first()
    .getAttribute('data-session');
  const form = page.locator(`[data-testid="session-row"][data-session="${other}"] [data-testid="blacklist"]`);
  await tabTo(page, form.locator('summary'), 200);
  await page.keyboard.press('Enter');
  await expect.poll(() => focusedTestId(page)).toBe('blacklist-reason');
  await page.keyboard.press('Escape');
  await expect(form).not.toHaveAttribute('open', '');
  await expect(form.locator('summary')).toBeFocused();
  await page.keyboard.press('Enter');
  await expect.poll(() => focusedTestId(page)).toBe('blacklist-reason');
  await page.keyboard.type('blacklisted from the sessions page by keyboard');
  await page.keyboard.press('Enter');
  await expect(page.getByTestId('notice')).toHaveAttribute('data-outcome', 'done');
  await expect(page.getByTestId('notice')).toContainText(`Blacklisted session ${other}`);
});

test.describe('light theme', () => {
  test.use({ colorScheme: 'light' });
  test('follows the system, the switch overrides it and is remembered before the first paint', async ({ page }) => {
    await signIn(page, stack, 'boss', LOCK_PAGE);
    await hydrated(page);
    const bg = () => page.evaluate(() => getComputedStyle(document.body).backgroundColor);
    expect(await bg()).toBe('rgb(255, 255, 255)');
    await page.getByTestId('pref-theme').selectOption('dark');
    expect(await bg()).toBe('rgb(15, 20, 25)');
    // Reloaded without the app's script: the remembered theme is applied by the
    // document's head alone, so the first paint is already dark.
    await page.route('**/pkg/lockscope.js', (r) => r.abort());
    await page.reload();
    expect(await bg()).toBe('rgb(15, 20, 25)');
    expect(await page.evaluate(() => document.documentElement.dataset.theme)).toBe('dark');
    await page.unroute('**/pkg/lockscope.js');
    await page.reload();
    await hydrated(page);
    await expect(page.getByTestId('pref-theme')).toHaveValue('dark');
    // State is said in words in both themes, never by colour alone.
    for (const theme of ['dark', 'light', 'system']) {
      await page.getByTestId('pref-theme').selectOption(theme);
      await expect(page.getByTestId('detail-state')).toHaveText(/\w{4,}/);
      expect(await violations(page), theme).toEqual([]);
    }
    expect(await bg()).toBe('rgb(255, 255, 255)');
  });
});

test.describe('time zone', () => {
  test.use({ timezoneId: 'Europe/Berlin' });
  test("absolute times switch between UTC and the browser's zone, say which, and the choice is remembered", async ({
    page,
  }) => {
    // An audit entry to read the time of (a blacklist of a session nobody has).
    const r = await stack.api('POST', `/api/v1/fleets/embedded/sessions/${'0'.repeat(32)}/blacklist`, 'boss', {
      reason: 'an entry for the time zone test',
    });
    expect(r.status, JSON.stringify(r.json)).toBeLessThan(500);
    await signIn(page, stack, 'boss', '/audit');
    await hydrated(page);
    const footer = page.locator('footer');
    const firstTime = page.getByTestId('audit-row').first().locator('td.time');
    await expect(footer).toContainText('shown in UTC');
    await expect(firstTime).toContainText(/\d\d:\d\d:\d\d UTC \(/);
    const utc = await firstTime.locator('time').getAttribute('datetime');
    await page.getByTestId('pref-zone').selectOption('local');
    // November in Berlin: CET, one hour east of UTC.
    await expect(footer).toContainText('shown in your time zone, UTC+1 now');
    const local = new Date(Date.parse(utc!) + 3_600_000).toISOString().slice(0, 19).replace('T', ' ');
    await expect(firstTime).toContainText(`${local} UTC+1 (`);
    await page.reload();
    await hydrated(page);
    await expect(page.getByTestId('pref-zone')).toHaveValue('local');
    await expect(firstTime).toContainText(`${local} UTC+1 (`);
    // The timeline's axis names its zone.
    await page.goto(`${stack.url}/history?fleet=embedded&lock=${encodeURIComponent(LOCK)}`);
    await hydrated(page);
    await expect(page.getByTestId('timeline-zone')).toHaveText('UTC+1');
    // A live page re-drawn in the chosen zone stays live.
    await page.goto(`${stack.url}${LOCK_PAGE}`);
    await hydrated(page);
    await expect(page.getByTestId('connection')).toHaveAttribute('data-state', 'live');
    await expect(footer).toContainText('shown in your time zone, UTC+1 now');
    await page.goto(`${stack.url}/?fleet=embedded`);
    await hydrated(page);
    await expect(page.getByTestId('connection')).toHaveAttribute('data-state', 'live');
    await expect(page.getByTestId('lock-row').first()).toBeVisible();
    await expect(page.getByTestId('held-for').first()).toHaveAttribute('title', /UTC\+1/);
    await page.goto(`${stack.url}/audit`);
    await hydrated(page);
    await page.getByTestId('pref-zone').selectOption('utc');
    await expect(footer).toContainText('shown in UTC');
    await expect(firstTime).toContainText(`${utc!.slice(0, 19).replace('T', ' ')} UTC (`);
  });
});
