// What the browser's rendering costs per frame when lock rows enter and leave the
// table, apart from the server, the socket and the wasm (on demand, not a test):
//
//   node end2end/bench/row-render.js [CSS] [ROWS] [K] [SECONDS]   (defaults: style/main.css 40 10 4)
//
// A static page holds the lock table's markup (a row's cells as app/src/table/row.rs
// writes them) under the given stylesheet, ROWS rows in a 700-px scroller at a
// 1,400 x 1,000 viewport, as the churn bench's page has them. Each animation frame
// removes K rows at random and inserts K new ones at random places (a name-sorted
// window with locks taken and released all over it), in one task. Chromium's trace
// of SECONDS of that gives the renderer main thread's CPU time (thread time, so a
// loaded machine changes it less than wall time) per rendered frame: the frame's
// own script (building the rows), style, layout, pre-paint, paint and layerize, and
// the style-and-layout passes per frame. Prints one JSON line.
// Compare stylesheets in turn: `git show REV:style/main.css > /dev/shm/old.css`.
const { chromium } = require('playwright-core');
const { readFileSync, writeFileSync, unlinkSync, mkdtempSync, rmdirSync } = require('node:fs');
const { join } = require('node:path');
const { tmpdir } = require('node:os');

const [cssFile = join(__dirname, '../../style/main.css'), rows = '40', k = '10', secs = '4'] = process.argv.slice(2);
const css = readFileSync(cssFile, 'utf8');
const columns = ['st', 'name', 'holder', 'purpose', 'age', 'expires', 'waiters', 'fence'];
const page = `<!doctype html><html><head><meta charset="utf-8"><style>${css}</style></head><body><main>
<div class="scroller"><table class="locks" role="table"><thead role="rowgroup"><tr role="row">
${columns.map((c) => `<th role="columnheader" class="${c}">${c}</th>`).join('')}</tr></thead>
<tbody role="rowgroup"><tr class="spacer" aria-hidden="true"><td colspan="8" style="height:0px"></td></tr>
<tr class="spacer" aria-hidden="true"><td colspan="8" style="height:0px"></td></tr></tbody></table></div></main>
<script>
let n = 0;
const cells = (i, t) =>
  '<td role="cell" data-testid="state" title="held, within its expected runtime" class="st"><span aria-hidden="true" class="icon">✓</span>healthy</td>' +
  '<td role="cell" title="svc-0/job-c' + i + '" class="name"><a href="/lock?fleet=bench&amp;name=svc-0%2Fjob-c' + i + '" data-testid="lock-link">svc-0/job-c' + i + '</a><!></td>' +
  '<td role="cell" title="service-0@host-0:' + i + ', session 0123456789abcdef" class="holder"><span class="where">service-0@host-0:' + i + '</span> <span class="session">0123456789abcdef</span></td>' +
  '<td role="cell" title="bench t=' + t + ' n=' + i + '" class="purpose">bench t=' + t + ' n=' + i + '</td>' +
  '<td role="cell" data-testid="held-for" title="acquired 08:00:00" class="age">0s</td>' +
  '<td role="cell" data-testid="expires-in" title="auto-unlock at 09:00:00" class="expires">59m 59s</td>' +
  '<td role="cell" data-testid="waiters" title="no waiters" class="waiters">0</td>' +
  '<td role="cell" data-testid="fence" title="fencing token ' + (1000000 + i) + '" class="fence">' + (1000000 + i) + '</td>';
const row = () => {
  const tr = document.createElement('tr');
  const i = n++;
  tr.setAttribute('role', 'row'); tr.setAttribute('data-testid', 'lock-row');
  tr.className = 'healthy'; tr.setAttribute('data-state', 'healthy');
  tr.innerHTML = cells(i, Date.now());
  return tr;
};
const body = document.querySelector('tbody'), end = body.lastElementChild;
for (let i = 0; i < ${Number(rows)}; i++) body.insertBefore(row(), end);
window.churn = () => {
  const step = () => {
    const rs = body.querySelectorAll('tr[data-testid=lock-row]');
    for (let j = 0; j < ${Number(k)}; j++) rs[Math.floor(Math.random() * rs.length)].remove();
    const kept = body.querySelectorAll('tr[data-testid=lock-row]');
    for (let j = 0; j < ${Number(k)}; j++) body.insertBefore(row(), kept[Math.floor(Math.random() * kept.length)] || end);
    requestAnimationFrame(step);
  };
  requestAnimationFrame(step);
};
</script></body></html>`;

(async () => {
  const dir = mkdtempSync(join(tmpdir(), 'row-render-'));
  const [html, trace] = [join(dir, 'page.html'), join(dir, 'trace.json')];
  writeFileSync(html, page);
  const browser = await chromium.launch({
    executablePath: process.env.CHROMIUM ?? '/usr/bin/chromium',
    args: ['--no-sandbox', '--disable-gpu'],
  });
  try {
    const tab = await browser.newPage({ viewport: { width: 1400, height: 1000 } });
    await tab.goto('file://' + html);
    await tab.waitForTimeout(500);
    await browser.startTracing(tab, { path: trace, categories: ['devtools.timeline', 'blink', 'cc', 'toplevel'] });
    await tab.evaluate(() => window.churn());
    await tab.waitForTimeout(Number(secs) * 1000);
    await browser.stopTracing();
  } finally {
    await browser.close();
  }
  const events = JSON.parse(readFileSync(trace, 'utf8')).traceEvents;
  unlinkSync(trace); unlinkSync(html); rmdirSync(dir);
  // The renderer's main thread: the CrRendererMain with the most events.
  const names = {};
  for (const e of events) if (e.ph === 'M' && e.name === 'thread_name') names[`${e.pid}:${e.tid}`] = e.args.name;
  const count = {};
  for (const e of events) { const t = `${e.pid}:${e.tid}`; if (names[t] === 'CrRendererMain') count[t] = (count[t] || 0) + 1; }
  const main = Object.entries(count).sort((a, b) => b[1] - a[1])[0][0];
  const cpu = {}, n = {};
  for (const e of events) {
    if (e.ph !== 'X' || `${e.pid}:${e.tid}` !== main) continue;
    cpu[e.name] = (cpu[e.name] || 0) + (e.tdur || 0) / 1000;
    n[e.name] = (n[e.name] || 0) + 1;
  }
  const frames = n['ProxyMain::BeginMainFrame'] || 0;
  const per = (name) => (frames ? Math.round((100 * (cpu[name] || 0)) / frames) / 100 : null);
  console.log(JSON.stringify({
    css: cssFile, rows: Number(rows), rows_in_and_out_per_frame: Number(k), frames,
    cpu_ms_per_frame: {
      all_tasks: per('ThreadControllerImpl::RunTask'), script: per('FunctionCall'),
      style: per('UpdateLayoutTree'), layout: per('Layout'), prepaint: per('PrePaint'),
      paint: per('LocalFrameView::RunPaintLifecyclePhase'), layerize: per('Layerize'),
    },
    style_passes_per_frame: frames ? Math.round((100 * (n.UpdateLayoutTree || 0)) / frames) / 100 : null,
  }));
})().catch((e) => { console.error(e); process.exit(1); });
