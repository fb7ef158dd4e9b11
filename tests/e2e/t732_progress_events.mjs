// timeout: 300
/* t732: the starting view follows a start by the session's event stream
 * (EventSource on /api/sessions/{id}/events), and by polling the plain GET
 * when the stream is blocked; both show the same stages and end in the lab.
 * Once through lighttpd and once through Apache (Chromium, playwright-core).
 *
 *   events:  no GET /api/sessions/{id} while starting, the stages appear one
 *            by one (setup takes 2 s), the lab view at ready
 *   blocked: the browser aborts every request to .../events: the page polls
 *            GET /api/sessions/{id} and reaches the lab view all the same
 */
import { ENV, PASSWORD, assert, done, endOpenSession, launch, report } from './lib.mjs';

const LESSON = 'test-slow-setup';
const FRONTENDS = [
  { name: 'lighttpd', url: ENV.LABVM_LIGHTTPD_URL || ENV.LABVM_URL, user: 'student271' },
  { name: 'apache', url: ENV.LABVM_APACHE_URL, user: 'student272' },
];

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
  const browser = await launch();
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
  done();
}

await main();
