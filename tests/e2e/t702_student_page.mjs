// timeout: 600
/* t702: the student page in Chromium (playwright-core driving Debian's
 * /usr/bin/chromium, headless), the whole scenario once through lighttpd and
 * once through Apache:
 *
 *   log in (HTTP Basic) -> lessons -> double-click Start while a second tab
 *   also presses Start (one session; the second tab shows it) -> the stages
 *   advance to ready (the simulator slowed down meanwhile, so they can be
 *   seen) -> type a command, see its output -> Grade: the task's step fails ->
 *   fix it in the terminal -> Grade: every step passes -> drop the network
 *   under the page (a TCP proxy between Chromium and the front end) and bring
 *   it back: the terminal reconnects by itself with new tickets -> a forged
 *   X-Remote-User / Remote-User header does not change who you are -> a
 *   second student on a front end whose labvm.fcgi has vm_capacity = 1 sees
 *   "capacity full" with the capacity and when to retry -> End (with its
 *   confirmation) -> the second student's retry then starts a lab ->
 *   Japanese text for a Japanese browser.
 *
 * Screenshots go to tests/e2e/artifacts/ (git-ignored). Sessions started
 * here are ended before the suite exits; the simulator's profile is restored.
 */
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import {
  ENV, PASSWORD, Scenario, api, assert, diag, done, endOpenSession, launch, report, sim, tap, termText,
  typeInTerminal, waitFor, waitTerm, watchPage,
} from './lib.mjs';

const HERE = path.dirname(fileURLToPath(import.meta.url));
const SRC = process.env.LABVM_SRC || path.resolve(HERE, '..', '..');
const ART = path.join(HERE, 'artifacts');
const LESSON = 'debian-golden';          // grader: README present, hello.txt says hello
const SLOW = 20;                         // simulator time scale while watching the stages

const FRONTENDS = [
  { name: 'lighttpd', url: ENV.LABVM_LIGHTTPD_URL || (ENV.LABVM_APACHE_URL ? null : ENV.LABVM_URL), users: ['student71', 'student72', 'student73'], portOffset: 700 },
  { name: 'apache', url: ENV.LABVM_APACHE_URL, users: ['student74', 'student75', 'student76'], portOffset: 710 },
];

/* ---------------------------------------------------------------- helpers */
function sql(q) {
  const r = spawnSync('psql', [ENV.LABVM_DATABASE, '-XAtc', q], { encoding: 'utf8' });
  if (r.status !== 0) throw new Error(`psql: ${r.stderr}`);
  return r.stdout.trim();
}

async function labVms(selector) {
  const q = encodeURIComponent('labvm.io/lab-session=true' + (selector ? ',' + selector : ''));
  const r = await sim('GET', `/apis/kubevirt.io/v1/namespaces/${ENV.LABVM_NAMESPACE || 'labs'}/virtualmachines?labelSelector=${q}`);
  if (r.status !== 200) throw new Error(`listing VMs: ${r.status} ${JSON.stringify(r.data)}`);
  return r.data.items;
}

/* A TCP proxy between Chromium and a front end: drop() cuts every open
 * connection (the console's WebSocket too), block(true) refuses new ones. */
class NetProxy {
  constructor(target) {
    const u = new URL(target);
    this.host = u.hostname;
    this.port = Number(u.port);
    this.socks = new Set();
    this.blocked = false;
  }

  async start() {
    this.server = net.createServer((c) => this.accept(c));
    await new Promise((r) => this.server.listen(0, '127.0.0.1', r));
    this.url = `http://127.0.0.1:${this.server.address().port}`;
    return this;
  }

  static kill(s) {
    if (typeof s.resetAndDestroy === 'function') s.resetAndDestroy();
    else s.destroy();
  }

  accept(c) {
    if (this.blocked) {
      NetProxy.kill(c);
      return;
    }
    const u = net.connect(this.port, this.host);
    this.socks.add(c);
    this.socks.add(u);
    const gone = () => {
      c.destroy();
      u.destroy();
      this.socks.delete(c);
      this.socks.delete(u);
    };
    for (const s of [c, u]) {
      s.on('error', gone);
      s.on('close', gone);
    }
    c.pipe(u);
    u.pipe(c);
  }

  block(on) {
    this.blocked = on;
    if (on) for (const s of this.socks) NetProxy.kill(s);
  }

  async close() {
    this.block(true);
    await new Promise((r) => this.server.close(r));
  }
}

/* What the page shows and knows, for a failure's diagnostics. */
async function pageState(p) {
  return p.evaluate(() => JSON.stringify({
    view: document.getElementById('app').dataset.view,
    conn: document.getElementById('conn').dataset.conn,
    connText: document.getElementById('conn-text').textContent,
    session: window.labvm.state.session,
    console: window.labvm.console && { state: window.labvm.console.state, failures: window.labvm.console.failures },
    terminal: (document.querySelector('#terminal .xterm-rows') || {}).textContent,
  }, null, 1)).catch((e) => `(no page state: ${e.message})`);
}

/* The page's own view of things. */
const view = (page) => page.getAttribute('#app', 'data-view');
async function newContext(browser, user, extra = {}) {
  const ctx = await browser.newContext({
    httpCredentials: { username: user, password: PASSWORD },
    viewport: { width: 1400, height: 900 }, locale: 'en-US', ...extra,
  });
  await ctx.addInitScript(() => {
    window.__csp = [];
    document.addEventListener('securitypolicyviolation', (e) => {
      window.__csp.push(`${e.violatedDirective} ${e.blockedURI}`);
    });
  });
  return ctx;
}

async function cspViolations(pages) {
  const out = [];
  for (const p of pages) {
    if (p.isClosed()) continue;
    out.push(...await p.evaluate(() => window.__csp || []));
  }
  return out;
}

/* An extra front end whose labvm.fcgi has vm_capacity = 1 (tests/e2e/frontend.py). */
function capacityFrontEnd(fe, stateDir, portBase) {
  const r = spawnSync('/usr/bin/python3', [path.join(HERE, 'frontend.py'), 'up', '--state', stateDir,
    '--frontend', fe, '--port-base', String(portBase), '--set', 'vm_capacity=1'],
  { encoding: 'utf8', env: ENV, timeout: 60000 });
  if (r.status !== 0) throw new Error(`extra ${fe} front end did not start: ${r.stderr}`);
  return r.stdout.trim().split('\n').pop();
}

function capacityFrontEndDown(stateDir) {
  spawnSync('/usr/bin/python3', [path.join(HERE, 'frontend.py'), 'down', '--state', stateDir],
    { encoding: 'utf8', env: ENV, timeout: 60000 });
}

/* --------------------------------------------------------------- scenario */
async function scenario(browser, fe, cleanups) {
  const sc = new Scenario(fe.name);
  const [A, B, C] = fe.users;
  const problems = [];
  const pages = [];
  const base = fe.url;
  // the stack's port base (lighttpd at base+80, Apache at base+90); ours are base+700 and +710
  const stackBase = ENV.LABVM_LIGHTTPD_URL ? Number(new URL(ENV.LABVM_LIGHTTPD_URL).port) - 80
    : Number(new URL(ENV.LABVM_APACHE_URL || ENV.LABVM_URL).port) - (ENV.LABVM_APACHE_URL ? 90 : 80);
  const capState = path.join(ENV.LABVM_STATE || path.join(SRC, '.check'), `e2e-capacity-${fe.name}`);
  const capBase = stackBase + fe.portOffset - (fe.name === 'apache' ? 90 : 80);
  let capUrl = null;
  let proxy = null;
  let ctxA = null;
  let page = null;
  let sid = null;
  let pageB = null;
  let sidB = null;
  const shot = (p, name) => p.screenshot({ path: path.join(ART, `${fe.name}-${name}.png`) });

  for (const u of fe.users) await endOpenSession(base, u);
  capacityFrontEndDown(capState);          // left over by a killed run, if any
  stopOnSignal.push(() => capacityFrontEndDown(capState));
  cleanups.push(async () => {
    for (const u of [A, C]) await endOpenSession(base, u).catch(() => {});
    if (capUrl) await endOpenSession(capUrl, B).catch(() => {});
    await endOpenSession(base, B).catch(() => {});
    if (proxy) await proxy.close().catch(() => {});
    capacityFrontEndDown(capState);
  });

  await sc.step('log in: the page lists the lessons, with security headers', async () => {
    proxy = await new NetProxy(base).start();
    ctxA = await newContext(browser, A);
    page = await ctxA.newPage();
    pages.push(page);
    watchPage(page, problems);
    const res = await page.goto(proxy.url + '/');
    assert(res.status() === 200, 'GET / status', res.status());
    const h = res.headers();
    assert(/script-src 'self'/.test(h['content-security-policy'] || ''), 'CSP header', h['content-security-policy']);
    assert(h['x-content-type-options'] === 'nosniff', 'nosniff', h['x-content-type-options']);
    assert(h['x-frame-options'] === 'DENY', 'X-Frame-Options', h['x-frame-options']);
    await page.waitForSelector('#view-lessons:not([hidden])');
    await page.waitForSelector(`#lesson-list li[data-lesson="${LESSON}"] button.start`);
    const lang = await page.getAttribute('html', 'lang');
    assert(lang === 'en', 'English for an English browser', lang);
    assert((await page.textContent('#view-lessons h2')) === 'Lessons', 'heading');
  });

  await sc.step('double-click Start and Start in a second tab: one session, both tabs show it', async () => {
    const before = await sim('GET', '/_sim/profile');
    assert(before.status === 200, 'reading the simulator profile', before);
    const restore = { profile: before.data.profile, time_scale: before.data.time_scale };
    try {
      const r = await sim('POST', '/_sim/profile', { profile: before.data.profile, time_scale: SLOW });
      assert(r.status === 200, 'slowing the simulator', r);
      // the second tab is already open on the lesson list
      const tab2 = await ctxA.newPage();
      pages.push(tab2);
      watchPage(tab2, problems);
      await tab2.goto(proxy.url + '/');
      await tab2.waitForSelector('#view-lessons:not([hidden]) button.start');
      const posts = [];
      page.on('request', (q) => { if (q.method() === 'POST' && q.url().endsWith('/api/sessions')) posts.push(q); });
      // record every view/stage the page shows
      await page.evaluate(() => {
        window.__seen = [];
        const rec = () => {
          const v = document.getElementById('app').dataset.view;
          const s = document.getElementById('stages').dataset.stage || '';
          const last = window.__seen[window.__seen.length - 1];
          if (!last || last.v !== v || last.s !== s) {
            window.__seen.push({ v, s, elapsed: document.getElementById('elapsed').textContent, t: Date.now() });
          }
        };
        rec();
        window.__obs = new MutationObserver(rec);
        window.__obs.observe(document.getElementById('app'), { attributes: true, subtree: true, attributeFilter: ['data-view', 'data-stage'] });
        setInterval(rec, 250);
      });
      const since = sql('SELECT extract(epoch from clock_timestamp())');
      const t0 = Date.now();
      await page.dblclick(`#lesson-list li[data-lesson="${LESSON}"] button.start`);
      await page.waitForSelector('#view-starting:not([hidden])');
      sid = await page.evaluate(() => window.labvm.state.session.id);
      // the second tab presses Start too (another lesson, even): it is shown the open one
      await tab2.click('#lesson-list li[data-lesson="linux-basics"] button.start');
      await tab2.waitForFunction(() => ['starting', 'lab'].includes(document.getElementById('app').dataset.view));
      const sid2 = await tab2.evaluate(() => window.labvm.state.session.id);
      assert(sid2 === sid, 'the second tab shows the same session', { sid, sid2 });
      const note = await tab2.evaluate(() => {
        const n = document.querySelector('#view-starting:not([hidden]) #starting-note, #view-lab:not([hidden]) #lab-note');
        return n && !n.hidden ? n.textContent : null;
      });
      assert(note && /already have a lab open/.test(note), 'the second tab says a lab is already open', note);
      await page.waitForSelector('#view-starting:not([hidden]) #stages[data-stage="booting"], #view-starting:not([hidden]) #stages[data-stage="setting_up"]', { timeout: 60000 })
        .then(() => shot(page, 'starting')).catch(() => diag('no screenshot of the starting stages (too quick)'));
      await page.waitForSelector('#view-lab:not([hidden])', { timeout: 120000 });
      const took = (Date.now() - t0) / 1000;
      const seen = await page.evaluate(() => { window.__obs.disconnect(); return window.__seen; });
      await tab2.close();
      diag(`stages seen: ${seen.map((x) => x.v === 'starting' ? `${x.s}@${x.elapsed}` : x.v).join(' -> ')} (${took.toFixed(1)}s)`);
      assert(posts.length === 1, 'one POST /api/sessions from the double click', posts.length);
      const n = sql(`SELECT count(*) FROM sessions WHERE user_name = '${A}' AND state IN ('starting', 'ready')`);
      assert(n === '1', 'one active session in the database', n);
      const total = sql(`SELECT count(*) FROM sessions WHERE user_name = '${A}' AND created_at >= to_timestamp(${since})`);
      assert(total === '1', 'one session created at all', total);
      const order = ['submitted', 'scheduling', 'booting', 'setting_up', 'ready'];
      const stages = seen.filter((x) => x.v === 'starting').map((x) => x.s);
      for (let i = 1; i < stages.length; i++) {
        assert(order.indexOf(stages[i]) > order.indexOf(stages[i - 1]), 'stages only advance', stages);
      }
      assert(new Set(stages).size >= 3, 'at least three stages were shown on the way', stages);
      assert(stages.includes('setting_up') || stages.includes('booting'), 'booting or setting up was shown', stages);
      assert(seen[seen.length - 1].v === 'lab', 'ends in the lab view', seen);
      const lastStarting = seen.filter((x) => x.v === 'starting').pop();
      assert(/[1-9]/.test(lastStarting.elapsed), 'the elapsed time counted up', lastStarting.elapsed);
      const disk = await api(base, A, 'GET', `/api/sessions/${sid}`);
      diag(`session ${sid}: disk ${JSON.stringify(disk.data && disk.data.disk)}`);
    } finally {
      await sim('POST', '/_sim/profile', restore);
    }
  });

  await sc.step('ready: the terminal connects; a typed command shows its output', async () => {
    await page.waitForSelector('#conn[data-conn="open"]', { timeout: 20000 });
    const left = await page.textContent('#remaining');
    assert(/^\d+:\d\d$/.test(left), 'time left is shown', left);
    const title = await page.textContent('#lab-title');
    assert(/golden/.test(title), 'the lesson title is shown', title);
    await typeInTerminal(page, 'echo lab-$((40+2))-ok; hostname');
    await waitTerm(page, 'lab-42-ok');
    const text = await termText(page);
    assert(/root@[^ ]*[#$]/.test(text), 'a root prompt is in the terminal', text.slice(-300));
    await shot(page, 'ready-terminal');
  });

  await sc.step('Grade shows the task failing, fixed in the terminal, Grade shows it passing', async () => {
    assert((await page.textContent('#grade-summary')) === 'Not graded yet', 'not graded yet');
    await page.click('#grade');
    await page.waitForSelector('#grade-panel[data-result="fail"]', { timeout: 30000 });
    assert(!(await page.isDisabled('#grade')), 'Grade can be pressed again');
    let summary = await page.textContent('#grade-summary');
    assert(summary === '1 of 2 steps passed', 'first grade', summary);
    const failing = await page.$$eval('#grade-steps li[data-passed="false"] .step-name', (l) => l.map((x) => x.textContent));
    assert(failing.length === 1 && failing[0] === 'hello.txt says hello', 'the failing step', failing);
    const detail = await page.textContent('#grade-steps li[data-passed="false"]');
    assert(/exit code [1-9]/.test(detail) && /No such file/.test(detail), 'its exit code and output are shown', detail);
    await typeInTerminal(page, 'echo hello > /root/hello.txt; echo fixed-$((1+1))');
    await waitTerm(page, 'fixed-2');
    await page.click('#grade');
    await page.waitForFunction(() => document.getElementById('grade-summary').textContent === '2 of 2 steps passed', null, { timeout: 30000 });
    const states = await page.$$eval('#grade-steps li', (l) => l.map((x) => x.dataset.passed));
    assert(states.length === 2 && states.every((s) => s === 'true'), 'every step passed', states);
    assert((await page.getAttribute('#grade-panel', 'data-result')) === 'pass', 'the panel shows a pass');
    const api2 = await api(base, A, 'GET', `/api/sessions/${sid}`);
    assert(api2.data.last_grade && api2.data.last_grade.passed === 2, 'the server kept the grade', api2.data.last_grade);
    await shot(page, 'grade');
  });

  await sc.step('the network drops and comes back: the terminal reconnects by itself (new ticket)', async () => {
    const tickets = [];
    const failedTickets = [];
    const sockets = [];
    page.on('request', (q) => { if (q.url().endsWith('/console-ticket')) tickets.push(q.url()); });
    page.on('requestfailed', (q) => { if (q.url().endsWith('/console-ticket')) failedTickets.push(q.failure()); });
    page.on('websocket', (ws) => sockets.push(ws.url()));
    proxy.block(true);           // cut every connection and refuse new ones
    await page.waitForSelector('#conn[data-conn="retrying"]', { timeout: 15000 });
    assert(await page.isVisible('#reconnect'), 'a Reconnect-now button is offered');
    // the page keeps trying while the network is down
    await waitFor(() => failedTickets.length >= 1, 20000, 'a reconnect attempt while the network is down');
    await shot(page, 'disconnected');
    proxy.block(false);
    await page.waitForSelector('#conn[data-conn="open"]', { timeout: 40000 });
    // the bridge replays the last screenful: the prompt is back at once
    await waitTerm(page, 'root@', 10000);
    await typeInTerminal(page, 'echo back-$((2+3))');
    await waitTerm(page, 'back-5');
    assert(sockets.length >= 1, 'a new WebSocket was opened', sockets.length);
    const ticketsOf = sockets.map((u) => new URL(u).searchParams.get('ticket'));
    assert(new Set(ticketsOf).size === ticketsOf.length, 'each connection used its own ticket', ticketsOf.length);
    assert(tickets.length >= 2, 'tickets were asked for again', tickets.length);
    diag(`reconnect: ${tickets.length} ticket requests (${failedTickets.length} failed while down), ${sockets.length} new WebSocket(s)`);
  });

  await sc.step('a reload comes back to the same lab, the screen replayed', async () => {
    await page.reload();
    await page.waitForSelector('#view-lab:not([hidden]) #conn[data-conn="open"]', { timeout: 20000 });
    const id = await page.evaluate(() => window.labvm.state.session.id);
    assert(id === sid, 'the same session', id);
    await waitTerm(page, 'back-5', 10000);
    assert((await page.textContent('#grade-summary')) === '2 of 2 steps passed', 'the last grade is shown again');
  });

  await sc.step('forged X-Remote-User / Remote-User headers do not change who you are', async () => {
    const ctxC = await newContext(browser, C, {
      extraHTTPHeaders: { 'X-Remote-User': A, 'Remote-User': A, 'X-Forwarded-User': A },
    });
    try {
      const pc = await ctxC.newPage();
      pages.push(pc);
      watchPage(pc, problems);
      await pc.goto(proxy.url + '/');
      await pc.waitForSelector('#view-lessons:not([hidden]) button.start');   // not A's lab
      const seen = await pc.evaluate(async (id) => {
        const a = await fetch('/api/sessions/current');
        const b = await fetch('/api/sessions/' + id);
        const c = await fetch('/api/sessions/' + id + '/console-ticket',
          { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: '{}' });
        return [a.status, b.status, c.status];
      }, sid);
      assert(JSON.stringify(seen) === '[404,404,404]', 'current, A\'s session and its console ticket are not C\'s', seen);
      const still = await api(base, A, 'GET', '/api/sessions/current', undefined, { 'X-Remote-User': C });
      assert(still.status === 200 && still.data.id === sid, 'A is still A, whatever header is sent', still.status);
    } finally {
      await ctxC.close();
    }
  }, { independent: true });

  await sc.step('a second student sees capacity full (capacity 1) with when to retry', async () => {
    capUrl = capacityFrontEnd(fe.name, capState, capBase);
    const ctxB = await newContext(browser, B);
    pageB = await ctxB.newPage();
    pages.push(pageB);
    watchPage(pageB, problems);
    await pageB.goto(capUrl + '/');
    await pageB.waitForSelector(`#lesson-list li[data-lesson="${LESSON}"] button.start`);
    const answer = pageB.waitForResponse((r) => r.url().endsWith('/api/sessions') && r.request().method() === 'POST');
    await pageB.click(`#lesson-list li[data-lesson="${LESSON}"] button.start`);
    const res = await answer;
    assert(res.status() === 503, 'POST /api/sessions answers 503', res.status());
    const retryAfter = Number(res.headers()['retry-after']);
    assert(retryAfter > 0, 'Retry-After header', res.headers()['retry-after']);
    await pageB.waitForSelector('#lessons-notice[data-kind="capacity"]:not([hidden])');
    const text = await pageB.textContent('#lessons-notice');
    assert(/All lab machines are in use/.test(text), 'capacity title', text);
    const m = /(\d+) of (\d+) lab machines are in use/.exec(text);
    assert(m && m[2] === '1' && Number(m[1]) >= 1, 'says the capacity (1) and how many are in use', text);
    const w = /try again in (\d+) s \(at about \d\d:\d\d:\d\d\)/.exec(text);
    assert(w && Number(w[1]) <= retryAfter && Number(w[1]) >= retryAfter - 5, `says when to retry (Retry-After ${retryAfter})`, text);
    assert(await pageB.isVisible('#notice-retry'), 'offers to try again');
    const cur = await api(capUrl, B, 'GET', '/api/sessions/current');
    assert(cur.status === 404, 'the second student has no session', cur.status);
    await shot(pageB, 'capacity-full');
  });

  await sc.step('End asks first, then ends the session and closes the terminal', async () => {
    await page.click('#end');
    await page.waitForSelector('#end-confirm:not([hidden])');
    await page.click('#end-no');
    assert(await page.isHidden('#end-confirm'), 'Keep working closes the question');
    assert((await view(page)) === 'lab', 'still in the lab');
    await page.click('#end');
    await page.click('#end-yes');
    await page.waitForSelector('#view-ended:not([hidden])', { timeout: 30000 });
    const text = await page.textContent('#ended-text');
    assert(text === 'You ended the lab.', 'ended text', text);
    assert((await page.$$('#terminal .xterm')).length === 0, 'the terminal is gone');
    const s = await api(base, A, 'GET', `/api/sessions/${sid}`);
    assert(s.data.state === 'ended' && s.data.end_reason === 'user', 'the session ended by the user', s.data);
    const cur = await api(base, A, 'GET', '/api/sessions/current');
    assert(cur.status === 404, 'no open session any more', cur.status);
    await waitFor(async () => (await labVms(`labvm.io/session-id=${sid}`)).length === 0, 30000, 'the VM is deleted');
    await page.click('#view-ended .to-lessons');
    await page.waitForSelector('#view-lessons:not([hidden]) button.start');
  });

  await sc.step('capacity freed: the second student\'s Try again starts a lab', async () => {
    assert(pageB, 'the capacity step ran');
    // capacity counts every lab VM in the cluster, terminating ones too
    const left = await waitFor(async () => {
      const vms = await labVms();
      return vms.length === 0 ? [] : null;
    }, 30000, 'no lab VM left in the cluster (capacity 1 free)').catch(async (e) => {
      throw new Error(`${e.message}: ${(await labVms()).map((v) => v.metadata.name).join(', ')}`);
    });
    assert(left.length === 0, 'the cluster is empty');
    const answer = pageB.waitForResponse((r) => r.url().endsWith('/api/sessions') && r.request().method() === 'POST');
    await pageB.click('#notice-retry');
    const res = await answer;
    assert(res.status() === 201, 'the retry is admitted', `${res.status()} ${await res.text()}`);
    await pageB.waitForFunction(() => ['starting', 'lab'].includes(document.getElementById('app').dataset.view), null, { timeout: 30000 });
    sidB = await pageB.evaluate(() => window.labvm.state.session.id);
    assert(sidB, 'a session was created');
    await pageB.waitForSelector('#view-lab:not([hidden]) #conn[data-conn="open"]', { timeout: 60000 })
      .catch(async (e) => { throw new Error(`${e.message}\n${await pageState(pageB)}`); });
    // ended elsewhere (another tab, the teacher): the bridge closes the console
    // with 4410 and the page shows the end at once, long before its next poll
    const r = await api(capUrl, B, 'DELETE', `/api/sessions/${sidB}`);
    assert(r.status === 200 && r.data.state === 'ended', 'ended again', r.status);
    await pageB.waitForSelector('#view-ended:not([hidden])', { timeout: 8000 });
  });

  await sc.step('a start that fails shows the error in words and a way to start again', async () => {
    await page.click('#lesson-list li[data-lesson="broken-setup"] button.start');
    await page.waitForSelector('#view-failed:not([hidden])', { timeout: 60000 });
    const title = await page.textContent('#failed-title');
    assert(title === 'The lab could not be started', 'failure title', title);
    const stage = await page.textContent('#failed-stage');
    assert(stage === 'Stage: Setting up the lab', 'the stage it failed in', stage);
    const err = await page.textContent('#failed-error');
    assert(/exit code 3/.test(err) && /lab data archive not found/.test(err), 'the setup\'s own error', err);
    assert(await page.isVisible('#failed-again'), 'Start again is offered');
    await shot(page, 'failed');
    await page.click('#view-failed .to-lessons');
    await page.waitForSelector('#view-lessons:not([hidden]) button.start');
    const cur = await api(base, A, 'GET', '/api/sessions/current');
    assert(cur.status === 404, 'nothing left open', cur.status);
  });

  await sc.step('a Japanese browser gets the page in Japanese; the switch changes it', async () => {
    const ctxJ = await newContext(browser, C, { locale: 'ja-JP' });
    try {
      const pj = await ctxJ.newPage();
      pages.push(pj);
      watchPage(pj, problems);
      await pj.goto(base + '/');
      await pj.waitForSelector('#view-lessons:not([hidden]) button.start');
      assert((await pj.getAttribute('html', 'lang')) === 'ja', 'lang=ja');
      assert((await pj.textContent('#view-lessons h2')) === 'レッスン', 'Japanese heading');
      assert((await pj.textContent('button.start')) === '演習を開始', 'Japanese button');
      const golden = '#lesson-list li[data-lesson="debian-golden"] h3';
      assert((await pj.textContent(golden)).startsWith('ゴールデンディスク'), 'the lesson\'s own Japanese title');
      await shot(pj, 'ja-lessons');
      await pj.click('#lang-switch button[data-lang="en"]');
      assert((await pj.textContent('#view-lessons h2')) === 'Lessons', 'switched to English');
      assert((await pj.textContent(golden)).startsWith('Debian on a golden disk'), 'and the lesson title too');
    } finally {
      await ctxJ.close();
    }
  }, { independent: true });

  await sc.step('no CSP violations and no script errors on any page', async () => {
    const csp = await cspViolations(pages);
    assert(csp.length === 0, 'CSP violations', csp);
    assert(problems.length === 0, 'script errors', problems);
  }, { independent: true });

  await ctxA?.close();
}

/* ------------------------------------------------------------------- main */
// tests/run ends a suite that runs too long with SIGTERM: the extra front
// ends run in their own process groups, so stop them here
const stopOnSignal = [];
for (const sig of ['SIGTERM', 'SIGINT']) {
  process.on(sig, () => {
    for (const f of stopOnSignal) f();
    // end the sessions of this suite's users (synchronously: we are exiting)
    const ends = FRONTENDS.filter((fe) => fe.url).map((fe) => fe.users.map((u) =>
      `a = Api(${JSON.stringify(u)}, base=${JSON.stringify(fe.url)}); r = a.current()\n` +
      'if r.status == 200: a.end(r.json["id"])').join('\n')).join('\n');
    spawnSync('/usr/bin/python3', ['-c', `from labclient import Api\n${ends}`],
      { env: { ...ENV, PYTHONPATH: path.join(SRC, 'tests', 'lib') }, timeout: 20000 });
    console.log(`not ok ${tap.n + 1} - interrupted by ${sig}`);
    process.exit(1);
  });
}

async function main() {
  fs.mkdirSync(ART, { recursive: true });
  const cleanups = [];
  let browser = null;
  try {
    browser = await launch();
    for (const fe of FRONTENDS) {
      if (!fe.url) {
        report(true, `${fe.name}: the whole scenario # SKIP no ${fe.name} front end in this stack`);
        continue;
      }
      await scenario(browser, fe, cleanups);
    }
  } catch (e) {
    report(false, 'the browser runs', e && e.stack ? e.stack : String(e));
  } finally {
    for (const c of cleanups) await c().catch((e) => diag(`cleanup: ${e}`));
    if (browser) await browser.close();
  }
  done();
}

await main();
