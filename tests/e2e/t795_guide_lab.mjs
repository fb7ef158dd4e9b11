// timeout: 600
/* t795_guide_lab.mjs - the lesson guide in the lab view (issue #30's page
 * half), in Chromium through each front end (lighttpd, Apache):
 *
 *   - wide (1400 px, linux-basics, a VM): the guide is a named region beside
 *     the terminal, before Grade in the Tab order; Run in terminal types the
 *     block into the console as keystrokes (the exact bytes go out on the
 *     console WebSocket, the echo shows them) and the guest runs them (a
 *     grade then passes the step); the ticks follow the grade; the split is a
 *     separator moved by the arrow keys and by the pointer, the terminal
 *     refits, the place is remembered over a reload; a change of language
 *     renders the Japanese guide, the ticks kept; axe finds 0 violations on
 *     the lab view with the guide, in English and Japanese;
 *   - a Pod lesson (k8s-pod-intro): Run in terminal, the shell in the Pod
 *     runs it, the grade passes the step;
 *   - a lesson of three machines (test-multi): run:worker2 switches to
 *     worker2's tab and types there, not in cp's; the grade's worker2 step
 *     passes and ticks;
 *   - a phone (390x844, touch): the guide is a tab beside the terminal's,
 *     arrow keys move between them, Run from the guide's tab switches to the
 *     terminal's tab and types; no sideways scrolling; axe on the guide tab;
 *   - the failed view (broken-setup, lighttpd) shows the lesson's guide,
 *     without Run in terminal.
 *
 * Screenshots of the wide and phone layouts go to tests/e2e/artifacts/.
 */
import fs from 'node:fs';
import path from 'node:path';
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';
import {
  ENV, PASSWORD, Scenario, api, assert, diag, done, endOpenSession, launch, waitFor, watchPage,
} from './lib.mjs';

const HERE = path.dirname(fileURLToPath(import.meta.url));
const ART = path.join(HERE, 'artifacts');
const AXE = fs.readFileSync(createRequire(import.meta.url).resolve('axe-core/axe.min.js'), 'utf8');
const FRONTENDS = [
  { name: 'lighttpd', url: ENV.LABVM_LIGHTTPD_URL || (ENV.LABVM_APACHE_URL ? null : ENV.LABVM_URL),
    users: { vm: 'student371', pod: 'student372', multi: 'student373', phone: 'student374' } },
  { name: 'apache', url: ENV.LABVM_APACHE_URL,
    users: { vm: 'student375', pod: 'student376', multi: 'student377', phone: 'student378' } },
].filter((f) => f.url);

/* ---------------------------------------------------------------- helpers */
async function openLab(browser, fe, user, lesson, extra = {}) {
  await endOpenSession(fe.url, user);
  const ctx = await browser.newContext({ httpCredentials: { username: user, password: PASSWORD },
    viewport: { width: 1400, height: 900 }, locale: 'en-US', ...extra });
  await ctx.addInitScript(() => {
    window.__csp = [];
    document.addEventListener('securitypolicyviolation', (e) => { window.__csp.push(`${e.violatedDirective} ${e.blockedURI}`); });
  });
  const page = await ctx.newPage();
  const problems = [];
  watchPage(page, problems);
  const sent = [];   // binary frames the page sent on console WebSockets: [url, Buffer]
  page.on('websocket', (ws) => ws.on('framesent', (f) => {
    if (typeof f.payload !== 'string') sent.push([ws.url(), Buffer.from(f.payload)]);
  }));
  const r = await api(fe.url, user, 'POST', '/api/sessions', { lesson });
  assert(r.status === 201, `${lesson} started`, r.data);
  await page.goto(fe.url + '/');
  await page.waitForSelector('#view-lab:not([hidden]) #conn[data-conn="open"]', { timeout: 90000 });
  await page.waitForSelector('#guide-pane .labguide', { state: 'attached', timeout: 20000 });
  return { ctx, page, problems, sent, sid: r.data.id };
}

const paneText = (page, machine = '') => page.evaluate((m) => {
  const rows = document.querySelector(`#terminal .term-pane[data-machine="${m}"] .xterm-rows`);
  return rows ? rows.textContent : '';
}, machine);

async function waitPane(page, needle, machine = '', timeout = 20000) {
  await page.waitForFunction(([n, m]) => {
    const rows = document.querySelector(`#terminal .term-pane[data-machine="${m}"] .xterm-rows`);
    return rows && rows.textContent.includes(n);
  }, [needle, machine], { timeout }).catch(async (e) => {
    throw new Error(`${e.message}: "${needle}" not in ${machine || 'the'} terminal: ${(await paneText(page, machine)).slice(-400)}`);
  });
}

/* Everything typed so far has run: the shell answers a marker it computes
 * (the typed line never holds it). */
async function settled(page, machine = '') {
  const n = 100 + Math.floor(Math.random() * 800);
  await page.evaluate(([m, k]) => {
    const c = window.labvm.consoles[m];
    c.term.input(`echo "SETTLED-$((${k}+1))"\r`, true);
  }, [machine, n]);
  await waitPane(page, `SETTLED-${n + 1}`, machine);
}

/* The Run in terminal button of the guide's code block whose text starts with `start`. */
const runButton = (page, start) => page.locator('#guide-pane .labguide-code', {
  has: page.locator('pre', { hasText: start }) }).locator('button.labguide-run');

/* Bytes sent on the console WebSockets from index `from` on, as one string. */
const sentSince = (sent, from) => Buffer.concat(sent.slice(from).map((x) => x[1])).toString('utf8');

/* Grade from the page; the guide's Check headings: [{text, passed, mark}]. */
async function gradeAndMarks(page) {
  const before = await page.evaluate(() => window.labvm.state.grade && window.labvm.state.grade.graded_at);
  await page.click('#grade');
  await page.waitForFunction((b) => {
    const g = window.labvm.state.grade;
    return g && g.graded_at !== b && !window.labvm.state.gradeBusy;
  }, before, { timeout: 30000 });
  return checkMarks(page);
}

const checkMarks = (page) => page.evaluate(() => [...document.querySelectorAll('#guide-pane .labguide-check')].map((h) => ({
  text: h.textContent, passed: h.dataset.passed, mark: h.querySelector('.labguide-mark').dataset.state })));

const markOf = (marks, name) => marks.find((m) => m.text.includes(name));

async function axe(page, where) {
  if (!(await page.evaluate(() => !!window.axe))) await page.evaluate(AXE);
  const out = [];
  for (const l of ['ja', 'en']) {
    await page.evaluate((x) => document.querySelector(`#lang-switch button[data-lang="${x}"]`).click(), l);
    await page.waitForFunction((x) => document.querySelector('#guide-pane .labguide').lang === x, l, { timeout: 10000 });
    const v = await page.evaluate(async () => (await window.axe.run(document, { resultTypes: ['violations'] }))
      .violations.map((x) => `${x.id} (${x.impact}): ${x.nodes.slice(0, 3).map((n) => n.target.join(' ')).join(' | ')}`));
    out.push(...v.map((x) => `${where} [${l}] ${x}`));
  }
  assert(out.length === 0, 'axe violations', '\n' + out.join('\n'));
}

const termFits = (page) => page.evaluate(() => {
  const box = document.getElementById('terminal').getBoundingClientRect();
  const scr = document.querySelector('#terminal .term-pane:not([hidden]) .xterm-screen').getBoundingClientRect();
  return { cols: window.labvm.console.term.cols, fits: scr.left >= box.left - 1 && scr.right <= box.right + 1 };
});

/* ------------------------------------------------------------- VM, wide */
async function vmWide(browser, fe) {
  const sc = new Scenario(`${fe.name} vm`);
  const user = fe.users.vm;
  let lab = null;
  try {
    await sc.step('linux-basics: the guide is a named region beside the terminal, with a separator', async () => {
      lab = await openLab(browser, fe, user, 'linux-basics');
      const m = await lab.page.evaluate(() => {
        const pane = document.getElementById('guide-pane');
        const g = pane.querySelector('.labguide');
        const sep = document.getElementById('guide-split');
        const r = (e) => e.getBoundingClientRect();
        return { layout: document.getElementById('lab-layout').dataset.guide, tag: g.tagName, label: g.getAttribute('aria-label'),
          lang: g.lang, pane: r(pane).right, sep: [r(sep).left, r(sep).right], term: r(document.getElementById('terminal-box')).left,
          role: sep.getAttribute('role'), orient: sep.getAttribute('aria-orientation'), now: sep.getAttribute('aria-valuenow'),
          sepLabel: sep.getAttribute('aria-label'), tabs: document.getElementById('machine-tabs').hidden,
          runs: pane.querySelectorAll('button.labguide-run').length };
      });
      assert(m.layout === 'side' && m.tag === 'SECTION' && m.label === 'Lesson guide' && m.lang === 'en', 'a named region', m);
      assert(m.pane <= m.sep[0] + 1 && m.sep[1] <= m.term + 1, 'guide | separator | terminal, left to right', m);
      assert(m.role === 'separator' && m.orient === 'vertical' && m.now === '35' && m.sepLabel === 'Width of the guide',
        'a named vertical separator at its default', m);
      assert(m.tabs && m.runs >= 10, 'no tabs for one machine; the guide\'s Run buttons', m);
    });

    await sc.step('Tab order: the guide, then its separator, then Grade, End and the terminal', async () => {
      const { page } = lab;
      await page.focus('#grade');
      await page.keyboard.press('Shift+Tab');
      const a = await page.evaluate(() => document.activeElement.id);
      await page.keyboard.press('Shift+Tab');
      const b = await page.evaluate(() => !!document.activeElement.closest('#guide-pane'));
      assert(a === 'guide-split' && b, 'Shift+Tab from Grade: the separator, then the guide', { a, b });
      await page.focus('#lab-title');
      await page.keyboard.press('Tab');
      const first = await page.evaluate(() => !!document.activeElement.closest('#guide-pane'));
      assert(first, 'Tab from the lab\'s heading enters the guide');
    });

    await sc.step('Run in terminal types the block as keystrokes; the guest runs it', async () => {
      const { page, sent } = lab;
      const from = sent.length;
      const b = runButton(page, 'echo hello > /root/hello.txt');
      assert(await b.textContent() === 'Run in terminal', 'the button is named');
      await b.click();
      await waitPane(page, 'echo hello > /root/hello.txt');
      await waitFor(() => sentSince(sent, from).includes('cat /root/hello.txt\r'), 10000, 'the keystrokes went out');
      const out = sentSince(sent, from);
      await settled(page);
      assert(out === 'echo hello > /root/hello.txt\rcat /root/hello.txt\r', 'exactly the block, each line ended by Enter', out);
      const focus = await page.evaluate(() => document.activeElement.classList.contains('labguide-run'));
      assert(focus, 'the focus stays on the button (a wide screen shows both)');
    });

    await sc.step('the ticks follow a grade: the step the block did passes, a step not done fails', async () => {
      const before = await checkMarks(lab.page);
      assert(before.length === 8 && before.every((m) => m.mark === 'none'), 'eight Check headings, not graded yet', before);
      const marks = await gradeAndMarks(lab.page);
      const hello = markOf(marks, 'hello.txt says hello');
      const runsh = markOf(marks, 'run.sh is executable');
      const files = markOf(marks, 'lab files are in place');
      assert(hello && hello.mark === 'pass' && hello.passed === 'true', 'hello.txt: a tick (the guest ran the block)', marks);
      assert(files && files.mark === 'pass', 'the lab files: a tick', marks);
      assert(runsh && runsh.mark === 'fail' && /failed/.test(runsh.text), 'run.sh: a cross, said in words', marks);
      const panel = await lab.page.$$eval('#grade-steps li', (xs) => xs.map((x) => x.dataset.passed));
      const g = await lab.page.evaluate(() => window.labvm.state.grade);
      assert(panel.filter((x) => x === 'true').length === marks.filter((m) => m.mark === 'pass').length,
        'the guide and the grade panel agree', { panel, g: g.passed });
    });

    await sc.step('the separator: arrow keys, Home and End move it; the terminal refits', async () => {
      const { page } = lab;
      const w0 = await page.evaluate(() => document.getElementById('guide-pane').getBoundingClientRect().width);
      const t0 = await termFits(page);
      await page.focus('#guide-split');
      for (let i = 0; i < 5; i++) await page.keyboard.press('ArrowRight');
      const now = await page.getAttribute('#guide-split', 'aria-valuenow');
      assert(now === '45', 'five steps of 2 %', now);
      const t1 = await waitFor(async () => {
        const t = await termFits(page);
        return t.cols < t0.cols ? t : null;
      }, 5000, 'the terminal refits narrower');
      const w1 = await page.evaluate(() => document.getElementById('guide-pane').getBoundingClientRect().width);
      assert(w1 > w0 + 50 && t1.fits, 'the guide wider, the terminal narrower and within its box', { w0, w1, t0, t1 });
      await page.keyboard.press('Home');
      assert(await page.getAttribute('#guide-split', 'aria-valuenow') === '20', 'Home: the least');
      await page.keyboard.press('End');
      assert(await page.getAttribute('#guide-split', 'aria-valuenow') === '70', 'End: the most');
      const txt = await page.getAttribute('#guide-split', 'aria-valuetext');
      assert(/70 %/.test(txt), 'the value in words', txt);
    });

    await sc.step('the separator: dragged by the pointer; the place is remembered over a reload', async () => {
      const { page } = lab;
      await page.evaluate(() => window.scrollTo(0, 0));    // Grade scrolled its result into view
      const lay = await page.evaluate(() => {
        const r = document.getElementById('lab-layout').getBoundingClientRect();
        const s = document.getElementById('guide-split').getBoundingClientRect();
        return { left: r.left, width: r.width, x: s.left + s.width / 2, y: Math.max(0, s.top) + 40 };
      });
      await page.mouse.move(lay.x, lay.y);
      await page.mouse.down();
      await page.mouse.move(lay.left + lay.width * 0.3, lay.y, { steps: 8 });
      await page.mouse.up();
      const now = Number(await page.getAttribute('#guide-split', 'aria-valuenow'));
      assert(Math.abs(now - 30) <= 1, 'dragged to 30 %', now);
      const t = await waitFor(async () => {
        const x = await termFits(page);
        return x.fits ? x : null;
      }, 5000, 'the terminal fits its box');
      await page.reload();
      await page.waitForSelector('#view-lab:not([hidden]) #conn[data-conn="open"]', { timeout: 30000 });
      await page.waitForSelector('#lab-layout[data-guide="side"]', { timeout: 20000 });
      const again = Number(await page.getAttribute('#guide-split', 'aria-valuenow'));
      assert(again === now, 'the same place after a reload', { now, again, t });
      const marks = await checkMarks(page);
      assert(markOf(marks, 'hello.txt says hello').mark === 'pass', 'the last grade\'s ticks are back too', marks);
    });

    await sc.step('a change of language renders the Japanese guide; the ticks stay', async () => {
      const { page } = lab;
      const en = await checkMarks(page);
      await page.click('#lang-switch button[data-lang="ja"]');
      await page.waitForFunction(() => document.querySelector('#guide-pane .labguide').lang === 'ja', null, { timeout: 10000 });
      const ja = await page.evaluate(() => ({
        run: document.querySelector('#guide-pane button.labguide-run').textContent,
        h: document.querySelector('#guide-pane h3').textContent,
        label: document.querySelector('#guide-pane .labguide').getAttribute('aria-label'),
        sep: document.getElementById('guide-split').getAttribute('aria-label'),
      }));
      assert(ja.run === 'ターミナルで実行' && /Linux の基本/.test(ja.h) && ja.label === 'レッスンガイド' && ja.sep === 'ガイドの幅',
        'the Japanese guide and names', ja);
      const marks = await checkMarks(page);
      assert(marks.map((m) => m.mark).join() === en.map((m) => m.mark).join(), 'the same ticks', { en, marks });
      await page.click('#lang-switch button[data-lang="en"]');
      await page.waitForFunction(() => document.querySelector('#guide-pane .labguide').lang === 'en', null, { timeout: 10000 });
    });

    await sc.step('axe: the lab view with the guide, a hint open and a result open: 0 violations (English, Japanese)', async () => {
      const { page } = lab;
      await page.evaluate(() => {
        document.querySelector('#guide-pane details.labguide-hint').open = true;
        document.querySelector('#guide-pane details.labguide-result:not([hidden])').open = true;
      });
      await axe(page, 'wide');
      fs.mkdirSync(ART, { recursive: true });
      await page.evaluate(() => {
        // the guide at its first ticked step, the page at its top
        const pane = document.getElementById('guide-pane');
        const h = pane.querySelector('.labguide-check');
        pane.scrollTop = h.getBoundingClientRect().top - pane.getBoundingClientRect().top + pane.scrollTop - 120;
        window.scrollTo(0, 0);
      });
      await page.screenshot({ path: path.join(ART, `guide-wide-${fe.name}.png`) });
    });

    await sc.step('no script errors, no CSP violations', async () => {
      const csp = lab ? await lab.page.evaluate(() => window.__csp) : [];
      assert(lab && lab.problems.length === 0 && csp.length === 0, 'problems', { problems: lab && lab.problems, csp });
    }, { independent: true });
  } finally {
    if (lab) await lab.ctx.close();
    await endOpenSession(fe.url, user).catch(() => {});
  }
}

/* ------------------------------------------------------------------- Pod */
async function pod(browser, fe) {
  const sc = new Scenario(`${fe.name} pod`);
  const user = fe.users.pod;
  let lab = null;
  try {
    await sc.step('k8s-pod-intro: Run in terminal; the shell in the Pod runs it; the grade ticks the step', async () => {
      lab = await openLab(browser, fe, user, 'k8s-pod-intro', { viewport: { width: 1300, height: 900 } });
      const { page, sent } = lab;
      await waitPane(page, '#');
      const from = sent.length;
      await runButton(page, "sed -i 's/^port = 8080$/port = 8081/'").click();
      await waitPane(page, "sed -i 's/^port = 8080$/port = 8081/' /srv/app/app.conf");
      await waitPane(page, 'port = 8081');
      const out = sentSince(sent, from);
      await settled(page);
      assert(out === "sed -i 's/^port = 8080$/port = 8081/' /srv/app/app.conf\rcat /srv/app/app.conf\r", 'the block as typed', out);
      const marks = await gradeAndMarks(page);
      const port = markOf(marks, 'port 8081');
      const hello = markOf(marks, 'hello.txt says hello');
      assert(port && port.mark === 'pass' && hello && hello.mark === 'fail', 'port: a tick; hello: a cross', marks);
      assert(lab.problems.length === 0, 'script errors', lab.problems);
    });
  } finally {
    if (lab) await lab.ctx.close();
    await endOpenSession(fe.url, user).catch(() => {});
  }
}

/* --------------------------------------------------------- three machines */
async function multi(browser, fe) {
  const sc = new Scenario(`${fe.name} machines`);
  const user = fe.users.multi;
  let lab = null;
  try {
    await sc.step('test-multi: run:worker2 switches to worker2\'s tab and types there; the grade ticks worker2\'s step', async () => {
      lab = await openLab(browser, fe, user, 'test-multi');
      const { page, sent } = lab;
      const sel0 = await page.$eval('#machine-tabs [aria-selected="true"]', (b) => b.textContent);
      assert(sel0 === 'cp', 'cp first', sel0);
      const b = page.locator('#guide-pane button.labguide-run[data-machine="worker2"]');
      assert(await b.getAttribute('aria-label') === 'Run in terminal: worker2', 'the button names the machine');
      const from = sent.length;
      await b.click();
      await page.waitForFunction(() => window.labvm.console && window.labvm.console.machine === 'worker2', null, { timeout: 10000 });
      const sel = await page.$eval('#machine-tabs [aria-selected="true"]', (x) => x.textContent);
      const shown = await page.$$eval('#terminal .term-pane', (ps) => ps.filter((p) => !p.hidden).map((p) => p.dataset.machine));
      assert(sel === 'worker2' && shown.join() === 'worker2', 'worker2\'s tab and terminal', { sel, shown });
      await waitPane(page, 'echo 42 > /root/answer', 'worker2');
      const cp = await paneText(page, 'cp');
      assert(!cp.includes('echo 42'), 'nothing typed into cp', cp.slice(-300));
      await settled(page, 'worker2');
      const ws = [...new Set(sent.slice(from).filter((x) => x[1].toString().includes('echo 42')).map((x) => x[0]))];
      assert(ws.length === 1 && sentSince(sent, from).startsWith('echo 42 > /root/answer\r'), 'on one console WebSocket', ws);
      const marks = await gradeAndMarks(page);
      const w2 = markOf(marks, 'answer on worker2');
      assert(w2 && w2.mark === 'pass', 'worker2\'s step: a tick', marks);
      const steps = await page.$$eval('#grade-steps li', (xs) => xs.map((x) => [x.dataset.machine, x.dataset.passed]));
      assert(steps.some(([m, p]) => m === 'worker2' && p === 'true'), 'the grade panel says so too', steps);
      assert(lab.problems.length === 0, 'script errors', lab.problems);
    });
  } finally {
    if (lab) await lab.ctx.close();
    await endOpenSession(fe.url, user).catch(() => {});
  }
}

/* ----------------------------------------------------------------- phone */
async function phone(browser, fe) {
  const sc = new Scenario(`${fe.name} phone`);
  const user = fe.users.phone;
  let lab = null;
  try {
    await sc.step('390 px: the guide is a tab beside the terminal\'s; the terminal\'s is selected; nothing scrolls sideways', async () => {
      lab = await openLab(browser, fe, user, 'linux-basics', { viewport: { width: 390, height: 844 }, isMobile: true, hasTouch: true });
      const { page } = lab;
      await page.waitForSelector('#lab-layout[data-guide="tab"] #machine-tabs:not([hidden])', { timeout: 20000 });
      const m = await page.evaluate(() => ({
        tabs: [...document.querySelectorAll('#machine-tabs [role="tab"]')].map((b) => [b.textContent, b.getAttribute('aria-selected'),
          b.getAttribute('aria-controls')]),
        list: document.getElementById('machine-tabs').getAttribute('aria-label'),
        guide: document.getElementById('guide-pane').hidden, term: document.getElementById('terminal-box').hidden,
        split: document.getElementById('guide-split').hidden,
        scroll: document.documentElement.scrollWidth, width: window.innerWidth }));
      assert(JSON.stringify(m.tabs) === JSON.stringify([['Guide', 'false', 'guide-pane'], ['Terminal', 'true', 'terminal']]),
        'two tabs', m);
      assert(m.list === 'Guide and terminal' && m.guide && !m.term && m.split, 'the terminal shown, the guide not', m);
      assert(m.scroll <= m.width, 'no sideways scrolling', m);
    });

    await sc.step('phone: the guide\'s tab shows the guide (arrow keys move between the tabs); axe on it (English, Japanese)', async () => {
      const { page } = lab;
      await page.tap('#tab_guide');
      let m = await page.evaluate(() => ({ guide: document.getElementById('guide-pane').hidden,
        term: document.getElementById('terminal-box').hidden, sel: document.querySelector('#machine-tabs [aria-selected="true"]').id }));
      assert(!m.guide && m.term && m.sel === 'tab_guide', 'the guide instead of the terminal', m);
      await page.focus('#tab_guide');
      await page.keyboard.press('ArrowRight');
      m = await page.evaluate(() => ({ sel: document.querySelector('#machine-tabs [aria-selected="true"]').id, foc: document.activeElement.id,
        term: document.getElementById('terminal-box').hidden }));
      assert(m.sel === 'tab_terminal' && m.foc === 'tab_terminal' && !m.term, 'ArrowRight: the terminal\'s tab', m);
      await page.keyboard.press('ArrowLeft');
      assert(await page.evaluate(() => document.activeElement.id) === 'tab_guide', 'ArrowLeft: back to the guide');
      await axe(page, 'phone guide tab');
      const sw = await page.evaluate(() => document.documentElement.scrollWidth <= window.innerWidth);
      assert(sw, 'no sideways scrolling with the guide shown');
      fs.mkdirSync(ART, { recursive: true });
      await page.screenshot({ path: path.join(ART, `guide-phone-guide-${fe.name}.png`) });
    });

    await sc.step('phone: Run in terminal from the guide\'s tab switches to the terminal\'s tab and types there', async () => {
      const { page, sent } = lab;
      const from = sent.length;
      await runButton(page, 'cd /root/lab').first().tap();
      const m = await page.evaluate(() => ({ sel: document.querySelector('#machine-tabs [aria-selected="true"]').id,
        foc: document.activeElement.id, guide: document.getElementById('guide-pane').hidden,
        term: document.getElementById('terminal-box').hidden }));
      assert(m.sel === 'tab_terminal' && m.foc === 'tab_terminal' && m.guide && !m.term,
        'the terminal\'s tab, with the focus', m);
      await waitPane(page, 'secret.txt');
      assert(sentSince(sent, from) === 'cd /root/lab\rls -l\r', 'the block as typed', sentSince(sent, from));
      await settled(page);
      const t = await termFits(page);
      assert(t.fits && t.cols >= 20 && t.cols < 80, 'the terminal fits the phone', t);
      await page.screenshot({ path: path.join(ART, `guide-phone-terminal-${fe.name}.png`) });
      assert(lab.problems.length === 0, 'script errors', lab.problems);
    });
  } finally {
    if (lab) await lab.ctx.close();
    await endOpenSession(fe.url, user).catch(() => {});
  }
}

/* ----------------------------------------------------------- failed view */
async function failed(browser, fe) {
  const sc = new Scenario(`${fe.name} failed`);
  const user = fe.users.vm;
  await endOpenSession(fe.url, user);
  const ctx = await browser.newContext({ httpCredentials: { username: user, password: PASSWORD },
    viewport: { width: 1200, height: 900 }, locale: 'en-US' });
  try {
    await sc.step('broken-setup fails: the failed view shows its guide, without Run in terminal', async () => {
      const page = await ctx.newPage();
      const problems = [];
      watchPage(page, problems);
      await page.goto(fe.url + '/');
      await page.click('#lesson-list li[data-lesson="broken-setup"] button.start');
      await page.waitForSelector('#view-failed:not([hidden])', { timeout: 90000 });
      await page.waitForSelector('#failed-guide:not([hidden]) .labguide', { timeout: 20000 });
      const m = await page.evaluate(() => ({ text: document.getElementById('failed-guide').textContent,
        runs: [...document.querySelectorAll('#failed-guide button.labguide-run')].filter((b) => b.offsetParent).length,
        label: document.querySelector('#failed-guide .labguide').getAttribute('aria-label') }));
      assert(/lab data archive not found/.test(m.text) && m.runs === 0 && m.label === 'Lesson guide', 'the guide says why', m);
      assert(problems.length === 0, 'script errors', problems);
    });
  } finally {
    await ctx.close();
    await endOpenSession(fe.url, user).catch(() => {});
  }
}

const browser = await launch();
try {
  for (const fe of FRONTENDS) {
    await vmWide(browser, fe);
    await pod(browser, fe);
    await multi(browser, fe);
    await phone(browser, fe);
  }
  if (FRONTENDS.length) await failed(browser, FRONTENDS[0]);
  diag(`screenshots: ${ART}/guide-*.png`);
} finally {
  await browser.close();
}
done();
