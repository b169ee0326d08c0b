// Chromium probe: where navigation -> live goes, step by step, on demand (not a test).
//
//   node end2end/bench/nav-live.js URL [URL...]
//
// Opens each URL in a fresh browser context (nothing cached, as bench.sh's probe)
// and waits until the page's live indicator shows. Prints one JSON line per URL,
// every time in ms after navigation start on the page's own clock:
// - `live`: the live indicator (set only once a frame is applied after hydration);
// - `doc_first_byte`, `doc_end`, `dom_interactive`, `dcl` (DOMContentLoaded), `load`;
// - `css`, `js`, `wasm`: each file's request start and last byte (resource timing);
// - `wasm_instantiate`: WebAssembly.instantiate(Streaming) called -> resolved
//   (with streaming, compile overlaps the download);
// - `ws_new`, `ws_open`, `ws_first_msg`, `ws_first_frame`: the early socket (the
//   page's head) made, its `open` event, its first message and first window frame
//   as the page's main thread saw them; `ws_adopted`: the hydrated page took the
//   socket over (its message handler replaced: hydration has ended by then);
// - `long_tasks`: main-thread tasks over 50 ms before live, [start, duration].
// To see where a view new to the server spends its time, give URLs of views the
// server has not made yet (distinct offsets).
const { chromium } = require('playwright-core');

const urls = process.argv.slice(2);
(async () => {
  const browser = await chromium.launch({
    executablePath: process.env.CHROMIUM ?? '/usr/bin/chromium',
    args: ['--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update', '--disable-sync', '--no-first-run'],
  });
  for (const url of urls) {
    const context = await browser.newContext({ viewport: { width: 1400, height: 1000 } });
    const page = await context.newPage();
    await page.addInitScript(() => {
      const t = (window.__nav = { long_tasks: [] });
      const now = () => Math.round(performance.now());
      new PerformanceObserver((list) => {
        for (const e of list.getEntries()) t.long_tasks.push([Math.round(e.startTime), Math.round(e.duration)]);
      }).observe({ type: 'longtask', buffered: true });
      const seen = new MutationObserver(() => {
        if (!document.querySelector('[data-testid=connection][data-state=live]')) return;
        t.live = now();
        seen.disconnect();
      });
      seen.observe(document, { subtree: true, childList: true, attributes: true, attributeFilter: ['data-state'] });
      for (const name of ['instantiateStreaming', 'instantiate']) {
        const orig = WebAssembly[name];
        WebAssembly[name] = function (...args) {
          const start = now();
          const p = orig.apply(this, args);
          p.then(() => { t.wasm_instantiate ??= [start, now(), name]; });
          return p;
        };
      }
      const Native = window.WebSocket;
      const desc = Object.getOwnPropertyDescriptor(Native.prototype, 'onmessage');
      window.WebSocket = function (url, protocols) {
        const ws = protocols === undefined ? new Native(url) : new Native(url, protocols);
        if (t.ws_new === undefined) {
          t.ws_new = now();
          ws.addEventListener('open', () => { t.ws_open = now(); });
          ws.addEventListener('message', (e) => {
            t.ws_first_msg ??= now();
            if (typeof e.data === 'string' && e.data.startsWith('{"type":"window"')) t.ws_first_frame ??= now();
          });
          let sets = 0;
          Object.defineProperty(ws, 'onmessage', {
            get() { return desc.get.call(ws); },
            set(f) { if (++sets === 2) t.ws_adopted = now(); desc.set.call(ws, f); },
          });
        }
        return ws;
      };
      window.WebSocket.prototype = Native.prototype;
      Object.assign(window.WebSocket, { CONNECTING: 0, OPEN: 1, CLOSING: 2, CLOSED: 3 });
    });
    await page.goto(url);
    await page.waitForSelector('[data-testid=connection][data-state=live]', { timeout: 30_000 });
    await page.waitForTimeout(200);
    const out = await page.evaluate(() => {
      const r = Math.round;
      const t = window.__nav;
      const n = performance.getEntriesByType('navigation')[0];
      const res = (end) => {
        const e = performance.getEntriesByType('resource').find((x) => x.name.endsWith(end));
        return e ? [r(e.startTime), r(e.responseEnd)] : null;
      };
      return {
        live: t.live, doc_first_byte: r(n.responseStart), doc_end: r(n.responseEnd), dom_interactive: r(n.domInteractive),
        dcl: r(n.domContentLoadedEventStart), load: r(n.loadEventStart),
        css: res('.css'), js: res('lockscope.js'), wasm: res('.wasm'), wasm_instantiate: t.wasm_instantiate,
        ws_new: t.ws_new, ws_open: t.ws_open, ws_first_msg: t.ws_first_msg, ws_first_frame: t.ws_first_frame, ws_adopted: t.ws_adopted,
        long_tasks: t.long_tasks.filter(([s]) => s < t.live),
      };
    });
    console.log(JSON.stringify({ url: url.replace(/^https?:\/\/[^/]+/, ''), ...out }));
    await context.close();
  }
  await browser.close();
})().catch((e) => { console.error(e); process.exit(1); });
