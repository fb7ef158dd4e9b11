// timeout: 240
/* t798: the teacher's room (web/teacher.html, issue #29) in Chromium, through
 * the stack's lighttpd, keyboard only:
 *
 *   a student's linux-basics lab is ready and graded -> teacher2 (who teaches
 *   linux-basics) sees the class: the student's row, a progress bar and a
 *   tick per step; axe (EN and JA) -> Tab to "Watch", Enter: the side panel's
 *   terminal shows the student's console, the student's session JSON names
 *   teacher2 watching, and so does the student's own page; what is typed
 *   there never reaches the guest -> Esc,
 *   "Take over", Enter: now it does, and the watchers say control -> a new
 *   grade shows up by itself (the live refresh) -> +10 min from the keyboard
 *   -> the CSV link answers text/csv -> at 390 px nothing overflows, axe
 *   again -> a student sees "No class here"; no CSP violation anywhere.
 */
import fs from 'node:fs';
import path from 'node:path';
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';
import { ENV, PASSWORD, Scenario, api, assert, done, endOpenSession, launch, sim, waitFor, watchPage } from './lib.mjs';

const HERE = path.dirname(fileURLToPath(import.meta.url));
const ART = path.join(HERE, 'artifacts');
const AXE = fs.readFileSync(createRequire(import.meta.url).resolve('axe-core/axe.min.js'), 'utf8');
const BASE = ENV.LABVM_LIGHTTPD_URL || ENV.LABVM_URL;
const TEACHER = 'teacher2';
const STUDENT = 'student387';
const OTHER = 'student388';

async function newContext(browser, user, viewport = { width: 1280, height: 900 }) {
  const ctx = await browser.newContext({ httpCredentials: { username: user, password: PASSWORD }, viewport, locale: 'en-US' });
  await ctx.addInitScript(() => {
    window.__csp = [];
    document.addEventListener('securitypolicyviolation', (e) => window.__csp.push(`${e.violatedDirective} ${e.blockedURI}`));
  });
  return ctx;
}

async function axeCheck(page, what) {
  const out = [];
  if (!(await page.evaluate(() => !!window.axe))) await page.evaluate(AXE);
  for (const l of ['en', 'ja']) {
    await page.evaluate((x) => document.querySelector(`#lang-switch button[data-lang="${x}"]`).click(), l);
    const v = await page.evaluate(async () => {
      const r = await window.axe.run(document, { resultTypes: ['violations'] });
      return r.violations.map((x) => `${x.id} (${x.impact}): ${x.nodes.slice(0, 3).map((n) => n.target.join(' ')).join(' | ')}`);
    });
    for (const x of v) out.push(`${what} [${l}]: ${x}`);
  }
  await page.evaluate(() => document.querySelector('#lang-switch button[data-lang="en"]').click());
  assert(out.length === 0, 'axe violations', '\n' + out.join('\n'));
}

/* Tab (forward) until the focused element matches sel; at most n presses. */
async function tabTo(page, sel, n = 60) {
  for (let i = 0; i < n; i++) {
    if (await page.evaluate((s) => document.activeElement && document.activeElement.matches(s), sel)) return;
    await page.keyboard.press('Tab');
  }
  throw new Error(`Tab never reached ${sel}`);
}

async function guestHas(vm, file) {
  const r = await sim('POST', `/_sim/guests/${ENV.LABVM_NAMESPACE || 'labs'}/${vm}/exec`, { cmd: `test -e ${file} && echo yes || echo no`, timeout_s: 10 });
  assert(r.status === 200, 'guest exec', r);
  return r.data.stdout.trim() === 'yes';
}

const panelText = (page) => page.evaluate(() => {
  const rows = document.querySelector('#terminal .xterm-rows');
  return rows ? rows.textContent : '';
});

async function main() {
  fs.mkdirSync(ART, { recursive: true });
  const browser = await launch();
  const sc = new Scenario('teacher page');
  let sid = null;
  let vm = null;
  let page = null;
  const problems = [];
  try {
    await sc.step('a graded linux-basics lab to look at', async () => {
      await endOpenSession(BASE, STUDENT);
      const r = await api(BASE, STUDENT, 'POST', '/api/sessions', { lesson: 'linux-basics' });
      assert(r.status === 201, 'start', r.text);
      sid = r.data.id;
      const s = await waitFor(async () => {
        const g = await api(BASE, STUDENT, 'GET', `/api/sessions/${sid}`);
        return g.data && g.data.state === 'ready' ? g.data : null;
      }, 90000, 'ready');
      vm = s.vms[0].name;
      const g = await api(BASE, STUDENT, 'POST', `/api/sessions/${sid}/grade`, {});
      assert(g.status === 200, 'grade', g.text);
    });

    await sc.step('the class: the student, a progress bar and a tick per step; axe EN/JA', async () => {
      const ctx = await newContext(browser, TEACHER);
      page = await ctx.newPage();
      watchPage(page, problems);
      await page.goto(`${BASE}/teacher.html`);
      await page.waitForSelector(`#class tr[data-session="${sid}"]`, { timeout: 15000 });
      const row = page.locator(`#class tr[data-session="${sid}"]`);
      assert((await row.locator('th').textContent()) === STUDENT, 'the student');
      const ticks = await row.locator('.tick').count();
      assert(ticks === 8, 'a tick per grader step (8)', ticks);
      const pass = await row.locator('.tick.pass').count();
      assert(pass >= 1, 'some ticks pass', pass);
      const v = await row.locator('progress').getAttribute('value');
      assert(Number(v) === pass, 'the progress bar counts the passed steps', { v, pass });
      assert((await page.getAttribute('#lesson-pick option', 'value')) === 'linux-basics', 'teacher2 teaches linux-basics');
      assert((await page.locator('#lesson-pick option').count()) === 1, 'and only it');
      await axeCheck(page, 'class');
      await page.screenshot({ path: path.join(ART, 'teacher-class.png'), fullPage: true });
    });

    await sc.step('keyboard: Watch opens the terminal; what is typed there never reaches the guest', async () => {
      await page.evaluate(() => { document.activeElement && document.activeElement.blur(); });
      await tabTo(page, `#class tr[data-session="${sid}"] button.watch`);
      await page.keyboard.press('Enter');
      await page.waitForSelector('#panel:not([hidden])');
      await waitFor(async () => /Watching/.test(await page.textContent('#panel-mode')), 15000, 'watching');
      await waitFor(async () => {
        const s = await api(BASE, STUDENT, 'GET', `/api/sessions/${sid}`);
        return (s.data.watchers || []).some((w) => w.user === TEACHER && w.mode === 'view');
      }, 10000, "the student's session names teacher2 watching");
      // the student's own page says who watches
      const sctx = await newContext(browser, STUDENT);
      const sp = await sctx.newPage();
      await sp.goto(`${BASE}/`);
      await sp.waitForSelector('#lab-watchers:not([hidden])', { timeout: 15000 });
      const note = await sp.textContent('#lab-watchers');
      assert(note.includes(TEACHER) && /watching/.test(note), "the student's page: teacher2 is watching", note);
      await axeCheck(sp, "the student's lab with a watcher");
      await sctx.close();
      await tabTo(page, '#terminal textarea');
      await page.keyboard.type('touch /root/e2e-viewed');
      await page.keyboard.press('Enter');
      await new Promise((r) => setTimeout(r, 1500));
      assert(!(await guestHas(vm, '/root/e2e-viewed')), 'the viewer typed nothing into the guest');
      await axeCheck(page, 'panel (view)');
    });

    await sc.step('keyboard: Esc, Take over: now the keystrokes arrive; watchers say control', async () => {
      await page.keyboard.press('Escape');
      assert(await page.evaluate(() => document.activeElement.id === 'take-over'), 'Esc lands on Take over');
      await page.keyboard.press('Enter');
      await waitFor(async () => /taken over/.test(await page.textContent('#panel-mode')), 15000, 'control');
      await tabTo(page, '#terminal textarea');
      await page.keyboard.type('touch /root/e2e-taken && echo took-$((6*7))');
      await page.keyboard.press('Enter');
      await waitFor(async () => (await panelText(page)).includes('took-42'), 15000, 'the echo in the panel');
      assert(await guestHas(vm, '/root/e2e-taken'), 'the teacher in control typed into the guest');
      await waitFor(async () => {
        const s = await api(BASE, STUDENT, 'GET', `/api/sessions/${sid}`);
        return (s.data.watchers || []).some((w) => w.user === TEACHER && w.mode === 'control');
      }, 10000, 'watchers: control');
    });

    await sc.step('live: a new grade shows without a reload', async () => {
      const before = await page.locator(`#class tr[data-session="${sid}"] .tick.pass`).count();
      await sim('POST', `/_sim/guests/${ENV.LABVM_NAMESPACE || 'labs'}/${vm}/exec`, { cmd: 'echo hello > /root/hello.txt', timeout_s: 10 });
      const g = await api(BASE, STUDENT, 'POST', `/api/sessions/${sid}/grade`, {});
      assert(g.status === 200, 'grade', g.text);
      await waitFor(async () => (await page.locator(`#class tr[data-session="${sid}"] .tick.pass`).count()) > before, 12000,
        'one more tick passes');
    });

    await sc.step('keyboard: +10 min extends; the CSV link answers text/csv', async () => {
      const e0 = (await api(BASE, STUDENT, 'GET', `/api/sessions/${sid}`)).data.expires_at;
      await page.focus('#lesson-pick');
      await tabTo(page, `#class tr[data-session="${sid}"] button.extend`);
      await page.keyboard.press('Enter');
      await waitFor(async () => /10 more minutes/.test(await page.textContent('#action-result')), 10000, 'extended');
      const e1 = (await api(BASE, STUDENT, 'GET', `/api/sessions/${sid}`)).data.expires_at;
      assert(Date.parse(e1) - Date.parse(e0) === 600000, 'expires 10 minutes later', { e0, e1 });
      const csv = await page.evaluate(async () => {
        const r = await fetch(document.getElementById('csv').href);
        return { status: r.status, type: r.headers.get('content-type'), text: await r.text() };
      });
      assert(csv.status === 200 && /^text\/csv/.test(csv.type), 'text/csv', csv);
      assert(csv.text.startsWith('user,session,machine,step,latest,attempts,first_passed_at\r\n'), 'the header', csv.text.slice(0, 80));
      assert(csv.text.includes(`${STUDENT},${sid},`), 'the student\'s rows', csv.text.slice(0, 300));
      const csp = await page.evaluate(() => window.__csp);
      assert(csp.length === 0, 'no CSP violation', csp);
      assert(problems.length === 0, 'no script error', problems);
    });

    await sc.step('390 px: nothing overflows the page; axe again', async () => {
      const ctx = await newContext(browser, TEACHER, { width: 390, height: 800 });
      const p = await ctx.newPage();
      await p.goto(`${BASE}/teacher.html`);
      await p.waitForSelector(`#class tr[data-session="${sid}"]`, { timeout: 15000 });
      const w = await p.evaluate(() => document.documentElement.scrollWidth);
      assert(w <= 391, 'the page is no wider than the phone', w);
      await p.screenshot({ path: path.join(ART, 'teacher-390.png'), fullPage: true });
      await axeCheck(p, '390 px');
      await ctx.close();
    }, { independent: true });

    await sc.step('a student gets "No class here"', async () => {
      const ctx = await newContext(browser, OTHER);
      const p = await ctx.newPage();
      await p.goto(`${BASE}/teacher.html`);
      await p.waitForSelector('#view-none:not([hidden])', { timeout: 15000 });
      await axeCheck(p, 'none');
      await ctx.close();
    }, { independent: true });
  } finally {
    await browser.close();
    if (sid) await api(BASE, STUDENT, 'DELETE', `/api/sessions/${sid}`);
  }
  done();
}

main().catch((e) => { console.error(e); process.exit(1); });
