// Chromium probe: store write -> row in the DOM, per change, for lockscope-bench.
//
//   node end2end/bench/dom-latency.js URL WRITE_LOG SECONDS [DONE_FILE]
//
// Opens URL (a lockscope page whose view shows the locks `lockscope-bench load`
// writes to most), waits until it is live, and records, for every `bench t=<ms>`
// stamp that appears in a row's purpose cell, the page's clock minus t (same host,
// same clock). After SECONDS, and once DONE_FILE exists if given (the load has
// made its last write), plus a quiet 1.5 s, it reads WRITE_LOG (`name t n`
// per line) and counts changes never shown: a write whose stamp was not seen and
// no later write of the same row was seen either (coalescing may skip a change,
// never lose a row's latest state). Prints one JSON line: the figures over every
// stamp, and `steady`, the same over writes made from 2 s after the page went live
// (the first seconds of a fresh page — wasm compiled and tiered up, the first
// frames rendered — on a loaded 2-core machine show stale rows longer).
// A stamp counts as seen when its row changes in place or enters the window (a
// whole row added to the table). Also `main_thread_busy_pct`: the page's main
// thread busy while the load runs, Chromium's TaskDuration (CDP Performance
// metrics) per wall-clock second, from live until the load's last write (and
// its script, style and layout shares, and `cpu_pct`, the thread's CPU time,
// which on a loaded machine is less than its tasks' wall time), and per
// second: `table_updates_per_s` (MutationObserver callbacks on the table),
// `rows_built_per_s` (row elements new to the table) and `rows_moved_per_s`
// (rows the table kept but re-inserted: the browser styles and lays them out
// again like new ones), `style_passes_per_s` and `layouts_per_s` (Chromium's
// style recalculations and layouts). With
// a churn log (`load --churn`: lines `name t n` take a lock, `name t n
// release` release it) also `churn`: locks
// still held but not in the window at the end (`held_not_shown`), released
// but still there (`released_not_left`), and release -> row gone (`left`).
// CPU_PROFILE=FILE writes the page's CPU profile over the same seconds there
// (a .cpuprofile: Chromium's DevTools opens it). TRACE=FILE writes Chromium's
// trace of those seconds there (DevTools' Performance panel opens it).
// Also `navigation_to_live_ms`: navigation start -> the page's live indicator.
const { chromium } = require('playwright-core');
const { existsSync, readFileSync, writeFileSync } = require('node:fs');

const [url, writeLog, seconds, doneFile] = process.argv.slice(2);
// The load's first write goes out as this probe starts: its last is due SECONDS from now.
const loadEnds = Date.now() + Number(seconds) * 1000;
(async () => {
  const browser = await chromium.launch({
    executablePath: process.env.CHROMIUM ?? '/usr/bin/chromium',
    args: ['--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update', '--disable-sync', '--no-first-run'],
  });
  const page = await browser.newPage({ viewport: { width: 1400, height: 1000 } });
  // Navigation -> live: when the page's live indicator first shows, on the
  // page's own clock (performance.now(): ms since the navigation started).
  await page.addInitScript(() => {
    const seen = new MutationObserver(() => {
      if (!document.querySelector('[data-testid=connection][data-state=live]')) return;
      window.__liveAfter = performance.now();
      seen.disconnect();
    });
    seen.observe(document, { subtree: true, childList: true, attributes: true, attributeFilter: ['data-state'] });
  });
  // Every stamp the page's sockets received, to tell a change the server never sent
  // from one the page received and did not show (stale_received below).
  const received = new Set();
  // Each socket the page opened: when, how many frames it got, when it closed.
  const sockets = [];
  page.on('websocket', (ws) => {
    const s = { url: ws.url().replace(/^.*\/ws/, '/ws').slice(0, 60), opened: Date.now(), frames: 0, last_frame: null, closed: null };
    sockets.push(s);
    ws.on('close', () => { s.closed = Date.now(); });
    ws.on('framereceived', ({ payload }) => {
      s.frames++;
      s.last_frame = Date.now();
      for (const m of String(payload).matchAll(/bench t=\d+ n=(\d+)/g)) received.add(m[1]);
    });
  });
  await page.goto(url);
  await page.waitForSelector('[data-testid=connection][data-state=live]', { timeout: 30_000 });
  const liveAt = Date.now();
  const navigationToLive = await page.evaluate(() => window.__liveAfter);
  // The page's main thread: Chromium's TaskDuration (seconds of tasks run) over the run.
  const cdp = await page.context().newCDPSession(page);
  await cdp.send('Performance.enable');
  const threadSeconds = async () =>
    Object.fromEntries((await cdp.send('Performance.getMetrics')).metrics.map((m) => [m.name, m.value]));
  await page.evaluate(() => {
    window.__seen = new Map();
    window.__left = new Map();
    window.__updates = 0;
    // Row elements inserted: new ones, and ones already in the table moved (the
    // keyed list re-inserting a row it keeps).
    window.__rows = { built: 0, moved: 0 };
    const known = new WeakSet(document.querySelectorAll('tr[data-testid=lock-row]'));
    const inserted = (row) => {
      if (known.has(row)) window.__rows.moved++;
      else { known.add(row); window.__rows.built++; }
    };
    const record = (row) => {
      const m = /bench t=(\d+) n=(\d+)/.exec(row.querySelector('td.purpose')?.textContent || '');
      if (m && !window.__seen.has(m[2])) window.__seen.set(m[2], Date.now() - Number(m[1]));
    };
    const rowsIn = (node) =>
      node.nodeType !== 1 ? [] : node.matches('tr[data-testid=lock-row]') ? [node] : [...node.querySelectorAll('tr[data-testid=lock-row]')];
    new MutationObserver((muts) => {
      window.__updates++;
      for (const mu of muts) {
        // A row entering the window: whole rows added to the table body.
        for (const node of mu.addedNodes) rowsIn(node).forEach((r) => { inserted(r); record(r); });
        // A row leaving it (or moving: the last removal counts, and a row still
        // in the document at the end has not left).
        for (const node of mu.removedNodes) rowsIn(node).forEach((r) => window.__left.set(r.dataset.lock, Date.now()));
        // A row changed in place.
        const el = mu.target.nodeType === 3 ? mu.target.parentElement : mu.target;
        const row = el && el.closest && el.closest('tr[data-testid=lock-row]');
        if (row) record(row);
      }
    }).observe(document.querySelector('[data-testid=lock-table]'), { subtree: true, childList: true, characterData: true });
  });
  const updates = () => page.evaluate(() => ({ n: window.__updates, ...window.__rows }));
  const [busy0, wall0, updates0] = [await threadSeconds(), Date.now(), await updates()];
  if (process.env.TRACE) {
    await browser.startTracing(page, {
      path: process.env.TRACE,
      categories: ['devtools.timeline', 'disabled-by-default-devtools.timeline', 'blink', 'cc', 'gpu', 'v8', 'toplevel'],
    });
  }
  if (process.env.CPU_PROFILE) {
    await cdp.send('Profiler.enable');
    await cdp.send('Profiler.setSamplingInterval', { interval: 200 });
    await cdp.send('Profiler.start');
  }
  // Busy over the load's seconds the page was live for (none: not measured).
  await page.waitForTimeout(Math.max(0, loadEnds - Date.now()));
  const busyFor = (Date.now() - wall0) / 1000;
  const busy1 = await threadSeconds();
  const updates1 = await updates();
  // Shares of the thread: all its tasks, and of them script, style and layout.
  const share = (m) => (busyFor >= 1 ? Math.round((100 * (busy1[m] - busy0[m])) / busyFor) : null);
  const busy = share('TaskDuration');
  // and the thread's CPU time (on a loaded machine a task's wall time includes waits for a core).
  const busySplit = {
    script_pct: share('ScriptDuration'), style_pct: share('RecalcStyleDuration'), layout_pct: share('LayoutDuration'),
    cpu_pct: share('ThreadTime'),
    table_updates_per_s: busyFor >= 1 ? Math.round((updates1.n - updates0.n) / busyFor) : null,
    rows_built_per_s: busyFor >= 1 ? Math.round((updates1.built - updates0.built) / busyFor) : null,
    rows_moved_per_s: busyFor >= 1 ? Math.round((updates1.moved - updates0.moved) / busyFor) : null,
    // Style and layout passes a second (Chromium's RecalcStyleCount and LayoutCount): about
    // one each per rendered frame when nothing forces more (content-visibility: auto's
    // rows cost a second pass each frame a row entered; docs/performance.md).
    style_passes_per_s: busyFor >= 1 ? Math.round((busy1.RecalcStyleCount - busy0.RecalcStyleCount) / busyFor) : null,
    layouts_per_s: busyFor >= 1 ? Math.round((busy1.LayoutCount - busy0.LayoutCount) / busyFor) : null,
  };
  if (process.env.TRACE) await browser.stopTracing();
  if (process.env.CPU_PROFILE) writeFileSync(process.env.CPU_PROFILE, JSON.stringify((await cdp.send('Profiler.stop')).profile));
  await page.waitForTimeout(Math.max(0, liveAt + Number(seconds) * 1000 - Date.now()));
  // A load that ran late (or a slow store) is waited for: rows read before its last
  // writes would count them as never shown.
  while (doneFile && !existsSync(doneFile)) await page.waitForTimeout(100);
  await page.waitForTimeout(1500);
  const seen = new Map(await page.evaluate(() => [...window.__seen.entries()]));
  const left = new Map(await page.evaluate(() => [...window.__left.entries()]));
  // What each row shows at the end: its stamp, if it has one.
  const shown = new Map(await page.locator('[data-testid=lock-row]').evaluateAll((rows) =>
    rows.map((r) => [r.dataset.lock, /bench t=\d+ n=(\d+)/.exec(r.querySelector('td.purpose')?.textContent || '')?.[1]])));
  const visible = new Set(shown.keys());
  await browser.close();

  const writes = readFileSync(writeLog, 'utf8').trim().split('\n').map((l) => l.split(' '));
  // Churn (`load --churn`): `name t n` takes a new lock, `name t n release` releases it.
  const releases = new Map(writes.filter((w) => w[3] === 'release').map(([name, t]) => [name, Number(t)]));
  const stamps = writes.filter((w) => w[3] !== 'release');
  const byRow = new Map();
  for (const [name, , n] of stamps) if (visible.has(name) || releases.has(name)) (byRow.get(name) ?? byRow.set(name, []).get(name)).push(n);
  let lost = 0, shownWrites = 0;
  for (const [name, ns] of byRow) {
    // A lock taken and released again may never show (one frame can carry both).
    let laterSeen = releases.has(name);
    for (let i = ns.length - 1; i >= 0; i--) {
      if (seen.has(ns[i])) laterSeen = true;
      else if (!laterSeen) lost++;
      shownWrites++;
    }
  }
  const figures = (lat) => {
    lat.sort((a, b) => a - b);
    const q = (p) => (lat.length ? lat[Math.min(lat.length - 1, Math.floor((p / 100) * lat.length))] : null);
    return { stamps_seen: lat.length, p50_ms: q(50), p95_ms: q(95), p99_ms: q(99), max_ms: lat.length ? lat[lat.length - 1] : null };
  };
  const writtenAt = new Map(writes.map(([, t, n]) => [n, Number(t)]));
  const steady = [...seen.entries()].filter(([n]) => writtenAt.get(n) >= liveAt + 2000).map(([, ms]) => ms);
  const churn = releases.size > 0 || stamps.some(([name]) => /-c\d+$/.test(name));
  const out = {
    writes_to_shown_rows: shownWrites, never_shown: lost, ...figures([...seen.values()]),
    steady: figures(steady),
    main_thread_busy_pct: busy, main_thread: busySplit,
    navigation_to_live_ms: navigationToLive === undefined ? null : Math.round(navigationToLive),
  };
  // A row still on screen at the end that shows an older stamp than the last one
  // written to it: the page shows the past (never_shown alone could also be a
  // change the probe's observer missed while the page shows it).
  const lastWrite = new Map(stamps.map(([name, , n]) => [name, n]));
  const stale = [...shown].filter(([name, n]) => lastWrite.has(name) && n !== lastWrite.get(name));
  out.stale_at_end = stale.length;
  // Of those, how many the page had received (its socket got the change, the rows do
  // not show it) rather than never been sent.
  out.stale_received = stale.filter(([name]) => received.has(lastWrite.get(name))).length;
  out.stamps_received = received.size;
  if (stale.length > 0) {
    // What to look at: the stale rows (shown and last written), and the sockets (times
    // relative to the end of the load).
    out.stale = stale.slice(0, 5).map(([name, n]) => `${name} shows n=${n} (written ${writtenAt.get(n) - loadEnds} ms), last n=${lastWrite.get(name)} (written ${writtenAt.get(lastWrite.get(name)) - loadEnds} ms)`);
    const at = (t) => (t === null ? null : t - loadEnds);
    out.sockets = sockets.map((s) => ({ ...s, opened: at(s.opened), last_frame: at(s.last_frame), closed: at(s.closed) }));
  }
  if (churn) {
    // Nothing lost: every churned lock still held is in the window at the end
    // (its names sort into the window's first rows), every released one has left.
    const taken = new Set(stamps.map(([name]) => name).filter((name) => /-c\d+$/.test(name)));
    const held = [...taken].filter((name) => !releases.has(name));
    out.churn = {
      taken: taken.size, released: releases.size,
      held_not_shown: held.filter((name) => !visible.has(name)).length,
      released_not_left: [...releases.keys()].filter((name) => visible.has(name)).length,
      left: figures([...releases].filter(([name]) => left.has(name)).map(([name, t]) => left.get(name) - t)),
    };
  }
  console.log(JSON.stringify(out));
})().catch((e) => { console.error(e); process.exit(1); });
