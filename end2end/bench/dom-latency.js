// Chromium probe: store write -> row in the DOM, per change, for lockscope-bench.
//
//   node end2end/bench/dom-latency.js URL WRITE_LOG SECONDS
//
// Opens URL (a lockscope page whose view shows the locks `lockscope-bench load`
// writes to most), waits until it is live, and records, for every `bench t=<ms>`
// stamp that appears in a row's purpose cell, the page's clock minus t (same host,
// same clock). After SECONDS (plus a quiet second) it reads WRITE_LOG (`name t n`
// per line) and counts changes never shown: a write whose stamp was not seen and
// no later write of the same row was seen either (coalescing may skip a change,
// never lose a row's latest state). Prints one JSON line: the figures over every
// stamp, and `steady`, the same over writes made from 2 s after the page went live
// (the first seconds of a fresh page — wasm compiled and tiered up, the first
// frames rendered — on a loaded 2-core machine show stale rows longer).
const { chromium } = require('playwright-core');
const { readFileSync } = require('node:fs');

const [url, writeLog, seconds] = process.argv.slice(2);
(async () => {
  const browser = await chromium.launch({
    executablePath: process.env.CHROMIUM ?? '/usr/bin/chromium',
    args: ['--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update', '--disable-sync', '--no-first-run'],
  });
  const page = await browser.newPage({ viewport: { width: 1400, height: 1000 } });
  await page.goto(url);
  await page.waitForSelector('[data-testid=connection][data-state=live]', { timeout: 30_000 });
  const liveAt = Date.now();
  await page.evaluate(() => {
    window.__seen = new Map();
    const record = (text) => {
      const m = /bench t=(\d+) n=(\d+)/.exec(text || '');
      if (m && !window.__seen.has(m[2])) window.__seen.set(m[2], Date.now() - Number(m[1]));
    };
    new MutationObserver((muts) => {
      for (const mu of muts) {
        const el = mu.target.nodeType === 3 ? mu.target.parentElement : mu.target;
        const row = el && el.closest && el.closest('tr[data-testid=lock-row]');
        if (row) record(row.querySelector('td.purpose')?.textContent);
      }
    }).observe(document.querySelector('[data-testid=lock-table]'), { subtree: true, childList: true, characterData: true });
  });
  await page.waitForTimeout(Number(seconds) * 1000 + 1500);
  const seen = new Map(await page.evaluate(() => [...window.__seen.entries()]));
  const visible = new Set(await page.locator('[data-testid=lock-row]').evaluateAll((rows) => rows.map((r) => r.dataset.lock)));
  await browser.close();

  const writes = readFileSync(writeLog, 'utf8').trim().split('\n').map((l) => l.split(' '));
  const byRow = new Map();
  for (const [name, , n] of writes) if (visible.has(name)) (byRow.get(name) ?? byRow.set(name, []).get(name)).push(n);
  let lost = 0, shownWrites = 0;
  for (const ns of byRow.values()) {
    let laterSeen = false;
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
  console.log(JSON.stringify({
    writes_to_shown_rows: shownWrites, never_shown: lost, ...figures([...seen.values()]),
    steady: figures(steady),
  }));
})().catch((e) => { console.error(e); process.exit(1); });
