// timeout: 300
/* t730: the starting view follows a start by the session's event stream
 * (EventSource on /api/sessions/{id}/events), and by polling the plain GET
 * when the stream is blocked; both show the same stages and end in the lab.
 * Once through lighttpd and once through Apache (Chromium, playwright-core).
 *
 *   events:  no GET /api/sessions/{id} while starting, the stages appear one
 *            by one (setup takes 2 s), the lab view at ready
 *   blocked: the browser aborts every request to .../events: the page polls
 *            GET /api/sessions/{id} and reaches the lab view all the same
 */
import { chromium } from 'playwright-core';

const ENV = process.env;
const PASSWORD = ENV.LABVM_PASSWORD || 'labvm';
const LESSON = 'test-slow-setup';
const CHROMIUM_ARGS = ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage', '--disable-quic',
  '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'];
const FRONTENDS = [
  { name: 'lighttpd', url: ENV.LABVM_LIGHTTPD_URL || ENV.LABVM_URL, user: 'student271' },
  { name: 'apache', url: ENV.LABVM_APACHE_URL, user: 'student272' },
];

let tapN = 0;
let tapFailed = 0;
function report(pass, name, diag) {
  tapN++;
  if (!pass) tapFailed++;
  console.log(`${pass ? 'ok' : 'not ok'} ${tapN} - ${name}`);
  if (diag) for (const l of String(diag).trimEnd().split('\n')) console.log(`#   ${l}`);
}
function assert(cond, what, detail) {
  if (!cond) throw new Error(what + (detail !== undefined ? `: ${JSON.stringify(detail)}` : ''));
}

const basic = (user) => 'Basic ' + Buffer.from(`${user}:${PASSWORD}`).toString('base64');
async function api(base, user, method, p) {
  const r = await fetch(base + p, { method, headers: { Accept: 'application/json', Authorization: basic(user) } });
  const text = await r.text();
  let data = null;
  try { data = JSON.parse(text); } catch (e) { data = null; }
  return { status: r.status, data };
}
async function endOpenSession(base, user) {
  const r = await api(base, user, 'GET', '/api/sessions/current');
  if (r.status === 200) await api(base, user, 'DELETE', `/api/sessions/${r.data.id}`);
}

/* Start LESSON on a fresh page; returns what the page did while starting. */
async function followStart(browser, fe, { blockEvents }) {
  await endOpenSession(fe.url, fe.user);
  const ctx = await browser.newContext({ httpCredentials: { username: fe.user, password: PASSWORD } });
  const page = await ctx.newPage();
  const seen = { polls: 0, streams: [], stages: [] };
  try {
    if (blockEvents) await page.route(/\/api\/sessions\/[^/]+\/events$/, (route) => route.abort('blockedbyclient'));
    page.on('request', (rq) => {
      const u = new URL(rq.url());
      if (/^\/api\/sessions\/[0-9a-f-]{36}$/.test(u.pathname) && rq.method() === 'GET') seen.polls++;
    });
    page.on('response', (rs) => {
      if (/\/events$/.test(new URL(rs.url()).pathname)) seen.streams.push(rs.status());
    });
    await page.goto(fe.url + '/');
    await page.waitForSelector(`#lesson-list li[data-lesson="${LESSON}"] button.start`);
    // the stages the starting view shows, as they change
    await page.evaluate(() => {
      window.__stages = [];
      const ol = document.getElementById('stages');
      const note = () => {
        const st = ol.dataset.stage;
        if (st && window.__stages[window.__stages.length - 1] !== st) window.__stages.push(st);
      };
      new MutationObserver(note).observe(ol, { attributes: true, attributeFilter: ['data-stage'] });
    });
    await page.click(`#lesson-list li[data-lesson="${LESSON}"] button.start`);
    await page.waitForSelector('#view-lab:not([hidden])', { timeout: 60000 });
    seen.stages = await page.evaluate(() => window.__stages);
    seen.state = await page.evaluate(() => window.labvm.state.session && window.labvm.state.session.state);
  } finally {
    await ctx.close();
    await endOpenSession(fe.url, fe.user);
  }
  return seen;
}

async function main() {
  const browser = await chromium.launch({ executablePath: '/usr/bin/chromium', headless: true, args: CHROMIUM_ARGS });
  try {
    for (const fe of FRONTENDS) {
      if (!fe.url) {
        report(true, `${fe.name}: # SKIP no ${fe.name} front end in this stack`);
        continue;
      }
      for (const blockEvents of [false, true]) {
        const name = `${fe.name}: the starting view follows a start ${blockEvents ? 'by polling when events are blocked' : 'by events'}`;
        try {
          const s = await followStart(browser, fe, { blockEvents });
          assert(s.state === 'ready', 'the lab view at ready', s);
          assert(s.stages.length >= 2 && s.stages.includes('setting_up'),
            'the stages showed one by one (setup takes 2 s)', s.stages);
          if (blockEvents) {
            assert(s.streams.length === 0, 'no stream answer reached the page', s.streams);
            assert(s.polls >= 2, 'it polled GET /api/sessions/{id}', s.polls);
          } else {
            assert(s.streams.length >= 1 && s.streams[0] === 200, 'the event stream opened', s.streams);
            assert(s.polls === 0, 'and the plain GET was never needed while starting', s.polls);
          }
          report(true, name);
        } catch (e) {
          report(false, name, e && e.stack ? e.stack : String(e));
        }
      }
    }
  } finally {
    await browser.close();
  }
  console.log(`1..${tapN}`);
  process.exit(tapFailed ? 1 : 0);
}

await main();
