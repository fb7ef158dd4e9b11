// timeout: 600
/* t722: the student page for every student (issue #22), in Chromium
 * (playwright-core driving Debian's /usr/bin/chromium):
 *
 *   - delivery, on each front end: the lesson list comes without xterm.js;
 *     the page's files are compressed (br or gzip); the vendored files are
 *     loaded through versioned URLs kept for a year;
 *   - keyboard only (lighttpd): Tab to Start, Enter; the terminal takes the
 *     focus at ready (the student stayed); type a command; Tab alone stays in
 *     the terminal, Esc then Tab leaves it for Grade; Enter grades (the focus
 *     stays, the result is said in a live region); Tab to End, Esc closes the
 *     question, End again, Yes; the focus lands on the ended view's heading;
 *   - axe-core (default rules) on every view on the way (lessons, starting,
 *     ready, grade, the End question, ended, failed), English and Japanese:
 *     no violations;
 *   - a 390x844 phone (touch): the terminal's columns fit its box, the size
 *     goes to the bridge, a long command keeps the prompt in view, the grade
 *     result is scrolled into view, header buttons are 44 px high; a student
 *     who moved on from the starting heading keeps the focus at ready.
 *
 * Sessions started here are ended before the suite exits; the simulator's
 * profile is restored.
 */
import fs from 'node:fs';
import path from 'node:path';
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';
import {
  ENV, PASSWORD, Scenario, api, assert, diag, done, endOpenSession, launch, report, sim, tap, waitTerm,
  watchPage,
} from './lib.mjs';

const HERE = path.dirname(fileURLToPath(import.meta.url));
const ART = path.join(HERE, 'artifacts');
const LESSON = 'debian-golden';          // grader: README present, hello.txt says hello
const SLOW = 20;                         // simulator time scale while the starting view is checked
const AXE = fs.readFileSync(createRequire(import.meta.url).resolve('axe-core/axe.min.js'), 'utf8');
const FRONTENDS = [
  { name: 'lighttpd', url: ENV.LABVM_LIGHTTPD_URL || (ENV.LABVM_APACHE_URL ? null : ENV.LABVM_URL), full: true },
  { name: 'apache', url: ENV.LABVM_APACHE_URL, full: false },
];
const USERS = { keyboard: 'student91', phone: 'student92', delivery: 'student93' };

/* ---------------------------------------------------------------- helpers */
async function newContext(browser, user, extra = {}) {
  const ctx = await browser.newContext({
    httpCredentials: { username: user, password: PASSWORD },
    viewport: { width: 1280, height: 860 }, locale: 'en-US', ...extra,
  });
  await ctx.addInitScript(() => {
    window.__csp = [];
    document.addEventListener('securitypolicyviolation', (e) => { window.__csp.push(`${e.violatedDirective} ${e.blockedURI}`); });
  });
  return ctx;
}

const active = (page) => page.evaluate(() => {
  const a = document.activeElement;
  if (!a || a === document.body) return 'body';
  if (a.closest('#terminal')) return 'terminal';
  return a.id ? '#' + a.id : a.tagName.toLowerCase() + (a.className ? '.' + String(a.className).split(' ')[0] : '');
});

/* axe-core with its default rules on the page as it is, in English and in
 * Japanese (the language switched by script, so the focus stays put). */
async function axeCheck(page, what, seen) {
  const out = [];
  if (!(await page.evaluate(() => !!window.axe))) await page.evaluate(AXE);
  const start = await page.evaluate(() => window.labvm.lang);
  for (const lang of [start, start === 'en' ? 'ja' : 'en']) {
    await page.evaluate((l) => document.querySelector(`#lang-switch button[data-lang="${l}"]`).click(), lang);
    const v = await page.evaluate(async () => {
      const r = await window.axe.run(document, { resultTypes: ['violations'] });
      return r.violations.map((x) => `${x.id} (${x.impact}): ${x.nodes.slice(0, 3).map((n) => n.target.join(' ')).join(' | ')}`);
    });
    for (const x of v) out.push(`${what} [${lang}]: ${x}`);
  }
  await page.evaluate((l) => document.querySelector(`#lang-switch button[data-lang="${l}"]`).click(), start);
  seen.push(what);
  assert(out.length === 0, 'axe violations', '\n' + out.join('\n'));
}

/* --------------------------------------------------------------- delivery */
async function delivery(browser, fe, sc) {
  await sc.step('the lesson list comes without xterm.js; files compressed; vendor URLs versioned, kept a year', async () => {
    const ctx = await newContext(browser, USERS.delivery);
    try {
      const page = await ctx.newPage();
      const problems = [];
      watchPage(page, problems);
      const got = [];
      page.on('response', (r) => got.push(r));
      await page.goto(fe.url + '/');
      await page.waitForSelector(`#lesson-list li[data-lesson="${LESSON}"] button.start`);
      const paths = got.map((r) => new URL(r.url()).pathname);
      assert(!paths.some((p) => p.startsWith('/vendor/')), 'nothing from /vendor/ before a lab starts', paths);
      assert(await page.evaluate(() => typeof window.Terminal === 'undefined'), 'xterm.js is not loaded');
      for (const p of ['/', '/app.js', '/app.css', '/i18n.js', '/text.js', '/api.js']) {
        const r = got.find((x) => new URL(x.url()).pathname === p);
        assert(r, `${p} was loaded`);
        const h = await r.allHeaders();
        assert(/^(br|gzip)$/.test(h['content-encoding'] || ''), `${p} is compressed`, h['content-encoding'] || '(none)');
        assert(/no-cache/.test(h['cache-control'] || ''), `${p} revalidates`, h['cache-control']);
      }
      // what a lab loads later (the lab's own scripts, the guide's): compressed, revalidated too
      const later = await page.evaluate(async () => {
        const out = [];
        for (const u of [...window.labvm.labScripts, '/guide.js', '/guide.css']) {
          const r = await fetch(u);
          out.push({ u, status: r.status, enc: r.headers.get('content-encoding'), cc: r.headers.get('cache-control') });
        }
        return out;
      });
      assert(later.length >= 6 && later.every((x) => x.status === 200 && /^(br|gzip)$/.test(x.enc || '') && /no-cache/.test(x.cc || '')),
        'the lab\'s files are compressed and revalidate', later);
      const v = await page.evaluate(async () => {
        const m = await (await fetch('/vendor/manifest.json')).json();
        const out = {};
        for (const [k, u] of Object.entries(m)) {
          const r = await fetch(u);
          out[k] = { url: u, status: r.status, cc: r.headers.get('cache-control'), type: r.headers.get('content-type') };
        }
        return out;
      });
      for (const k of ['xterm.js', 'xterm.css', 'addon-fit.js']) {
        assert(v[k] && /\?v=[0-9a-f]{8,}$/.test(v[k].url), `${k}: a versioned URL`, v[k]);
        assert(v[k].status === 200 && /max-age=31536000/.test(v[k].cc) && /immutable/.test(v[k].cc), `${k}: kept a year`, v[k]);
      }
      const enc = await page.evaluate(async (u) => {
        const r = await fetch(u);
        return [...r.headers].length && (await r.text()).length;
      }, v['xterm.js'].url);
      assert(enc > 100000, 'xterm.js arrives whole', enc);
      assert(problems.length === 0, 'script errors', problems);
    } finally {
      await ctx.close();
    }
  }, { independent: true });
}

/* ---------------------------------------------------------- keyboard only */
async function keyboard(browser, fe, sc, axeSeen) {
  const user = USERS.keyboard;
  await endOpenSession(fe.url, user);
  const ctx = await newContext(browser, user);
  const page = await ctx.newPage();
  const problems = [];
  watchPage(page, problems);
  const shot = (name) => page.screenshot({ path: path.join(ART, `a11y-${name}.png`) }).catch(() => {});
  let sid = null;
  try {
    await sc.step('axe: the lesson list (English, Japanese)', async () => {
      await page.goto(fe.url + '/');
      await page.waitForSelector(`#lesson-list li[data-lesson="${LESSON}"] button.start`);
      assert(/Lessons/.test(await page.title()), 'the title names the view', await page.title());
      await axeCheck(page, 'lessons', axeSeen);
    });

    await sc.step('keyboard: Tab to Start, Enter; the focus goes to the starting heading (axe: starting)', async () => {
      const before = await sim('GET', '/_sim/profile');
      const restore = { profile: before.data.profile, time_scale: before.data.time_scale };
      try {
        await sim('POST', '/_sim/profile', { profile: before.data.profile, time_scale: SLOW });
        let found = false;
        for (let i = 0; i < 40 && !found; i++) {
          await page.keyboard.press('Tab');
          found = await page.evaluate((l) => document.activeElement && document.activeElement.matches(`li[data-lesson="${l}"] button.start`), LESSON);
        }
        assert(found, 'Tab reaches the lesson\'s Start button');
        await page.keyboard.press('Enter');
        await page.waitForSelector('#view-starting:not([hidden])', { timeout: 20000 });
        sid = await page.evaluate(() => window.labvm.state.session.id);
        assert((await active(page)) === '#starting-title', 'the focus is on the starting heading', await active(page));
        assert(/^Starting: /.test(await page.title()), 'the title says starting', await page.title());
        await page.waitForFunction(() => document.getElementById('stage-live').textContent.startsWith('Stage: '), null, { timeout: 5000 });
        await axeCheck(page, 'starting', axeSeen);
        await shot('starting');
      } finally {
        await sim('POST', '/_sim/profile', restore);
      }
    });

    await sc.step('keyboard: at ready the terminal has the focus; typing works; Tab, and Esc with another key, stay inside (axe: ready)', async () => {
      await page.waitForSelector('#view-lab:not([hidden]) #conn[data-conn="open"]', { timeout: 120000 });
      await page.waitForFunction(() => document.activeElement && document.activeElement.closest('#terminal'), null, { timeout: 5000 });
      await waitTerm(page, 'root@', 15000);
      await page.keyboard.type('echo kbd-$((6*7))');
      await page.keyboard.press('Enter');
      await waitTerm(page, 'kbd-42');
      await page.keyboard.type('echo zz');
      await page.keyboard.press('Tab');       // the shell's completion (of nothing here)
      assert((await active(page)) === 'terminal', 'Tab stays in the terminal', await active(page));
      await page.keyboard.press('Control+U');   // and the line is cleared again
      // Esc followed by another key still reaches the shell: Esc . is
      // readline's yank-last-arg, so "echo " Esc . becomes "echo esc7"
      await page.keyboard.type("printf '%s-ok\\n' esc7");
      await page.keyboard.press('Enter');
      await waitTerm(page, 'esc7-ok');
      await page.keyboard.type('echo ');
      await page.keyboard.press('Escape');
      await page.keyboard.press('.');
      await page.keyboard.press('Enter');
      await waitTerm(page, 'echo esc7', 10000).catch(async () => {
        throw new Error('Esc . did not reach the shell: ' + (await page.textContent('#terminal .xterm-rows')).slice(-400));
      });
      assert((await active(page)) === 'terminal', 'Esc and another key stay in the terminal', await active(page));
      const hint = await page.textContent('#term-hint');
      assert(/Esc, then Tab/.test(hint), 'a visible hint says how to leave', hint);
      const desc = await page.evaluate(() => document.activeElement.getAttribute('aria-describedby'));
      assert(desc === 'term-hint', 'the terminal input is described by the hint', desc);
      assert(await page.evaluate(() => !!document.querySelector('#terminal .xterm-accessibility')), 'xterm.js screen-reader mode is on');
      await page.waitForFunction(() => document.querySelector('#terminal .xterm-accessibility-tree').textContent.includes('kbd-42'),
        null, { timeout: 5000 }).catch(() => { throw new Error('the output is not in the accessibility tree'); });
      await page.waitForFunction(() => document.getElementById('conn-live').textContent === 'Connected', null, { timeout: 5000 });
      await axeCheck(page, 'ready', axeSeen);
    });

    await sc.step('keyboard: Esc then Tab leaves the terminal for Grade; Enter grades, the result is said (axe: grade)', async () => {
      await page.keyboard.press('Escape');
      await page.keyboard.press('Tab');
      assert((await active(page)) === '#grade', 'Esc, Tab: the focus is on Grade', await active(page));
      await page.keyboard.press('Enter');
      await page.waitForSelector('#grade-panel[data-result="fail"]', { timeout: 30000 });
      assert((await active(page)) === '#grade', 'the focus stays on Grade', await active(page));
      await page.waitForFunction(() => /1 of 2 steps passed/.test(document.getElementById('grade-live').textContent), null, { timeout: 5000 });
      const said = await page.textContent('#grade-live');
      assert(/hello\.txt says hello/.test(said), 'the failed step is named', said);
      await axeCheck(page, 'grade', axeSeen);
      await shot('grade');
      // and back into the terminal: Shift+Tab from Grade is not it, a click is
      // not allowed here: Tab order goes Grade -> End -> terminal
      await page.keyboard.press('Tab');
      assert((await active(page)) === '#end', 'Tab: End lab', await active(page));
      await page.keyboard.press('Tab');
      assert((await active(page)) === 'terminal', 'Tab: into the terminal', await active(page));
      await page.keyboard.type('echo hello > /root/hello.txt; echo fixed-$((1+1))');
      await page.keyboard.press('Enter');
      await waitTerm(page, 'fixed-2');
      await page.keyboard.press('Escape');
      await page.keyboard.press('Tab');
      await page.keyboard.press('Enter');
      await page.waitForFunction(() => /2 of 2 steps passed/.test(document.getElementById('grade-live').textContent), null, { timeout: 30000 })
        .catch(async (e) => {
          throw new Error(`${e.message}\n${await page.evaluate(() => JSON.stringify({
            live: document.getElementById('grade-live').textContent, active: document.activeElement.id,
            summary: document.getElementById('grade-summary').textContent,
            term: document.querySelector('#terminal .xterm-rows').textContent.slice(-600) }))}`);
        });
    });

    await sc.step('keyboard: End asks (a named dialog, axe), Esc closes it, End, Yes: the ended view has the focus (axe)', async () => {
      await page.keyboard.press('Tab');
      assert((await active(page)) === '#end', 'Tab: End lab', await active(page));
      await page.keyboard.press('Enter');
      await page.waitForSelector('#end-confirm:not([hidden])');
      assert((await active(page)) === '#end-no', 'the question has the focus (Keep working)', await active(page));
      const name = await page.evaluate(() => {
        const d = document.getElementById('end-confirm');
        return document.getElementById(d.getAttribute('aria-labelledby')).textContent;
      });
      assert(/End this lab\?/.test(name), 'the dialog is named by its question', name);
      await axeCheck(page, 'end question', axeSeen);
      await page.keyboard.press('Escape');
      assert(await page.isHidden('#end-confirm'), 'Esc closes the question');
      assert((await active(page)) === '#end', 'the focus is back on End lab', await active(page));
      await page.keyboard.press('Enter');
      await page.waitForSelector('#end-confirm:not([hidden])');
      await page.keyboard.press('Shift+Tab');
      assert((await active(page)) === '#end-yes', 'Shift+Tab: Yes, end it', await active(page));
      await page.keyboard.press('Enter');
      await page.waitForSelector('#view-ended:not([hidden])', { timeout: 30000 });
      await page.waitForFunction(() => document.activeElement && document.activeElement.id === 'ended-title', null, { timeout: 5000 });
      assert(/Lab ended/.test(await page.title()), 'the title says ended', await page.title());
      const s = await api(fe.url, user, 'GET', `/api/sessions/${sid}`);
      assert(s.data.state === 'ended' && s.data.end_reason === 'user', 'the session ended', s.data);
      await axeCheck(page, 'ended', axeSeen);
      await page.keyboard.press('Tab');
      assert((await active(page)) === 'button.to-lessons', 'Tab: Back to lessons', await active(page));
      await page.keyboard.press('Enter');
      await page.waitForSelector('#view-lessons:not([hidden]) button.start');
      assert((await active(page)) === '#lessons-title', 'the focus is on the lessons heading', await active(page));
    });

    await sc.step('axe: a start that fails (English, Japanese)', async () => {
      await page.click('#lesson-list li[data-lesson="broken-setup"] button.start');
      await page.waitForSelector('#view-failed:not([hidden])', { timeout: 60000 });
      await axeCheck(page, 'failed', axeSeen);
      await page.click('#view-failed .to-lessons');
      await page.waitForSelector('#view-lessons:not([hidden]) button.start');
    });

    await sc.step('no CSP violations and no script errors', async () => {
      const csp = await page.evaluate(() => window.__csp || []);
      assert(csp.length === 0, 'CSP violations', csp);
      assert(problems.length === 0, 'script errors', problems);
    }, { independent: true });
  } finally {
    await endOpenSession(fe.url, user).catch(() => {});
    await ctx.close();
  }
}

/* ------------------------------------------------------------------ phone */
async function phone(browser, fe, sc) {
  const user = USERS.phone;
  await endOpenSession(fe.url, user);
  const ctx = await newContext(browser, user, { viewport: { width: 390, height: 844 }, isMobile: true, hasTouch: true });
  const page = await ctx.newPage();
  const problems = [];
  watchPage(page, problems);
  const frames = [];
  page.on('websocket', (ws) => ws.on('framesent', (f) => { if (typeof f.payload === 'string') frames.push(f.payload); }));
  try {
    await sc.step('phone 390x844: the page fits; header buttons are 44 px high', async () => {
      await page.goto(fe.url + '/');
      await page.waitForSelector(`#lesson-list li[data-lesson="${LESSON}"] button.start`);
      const m = await page.evaluate(() => ({
        scroll: document.documentElement.scrollWidth, width: window.innerWidth,
        buttons: [...document.querySelectorAll('header button, button.start')].map((b) => Math.round(b.getBoundingClientRect().height)),
      }));
      assert(m.scroll <= m.width, 'no sideways scrolling', m);
      assert(m.buttons.every((h) => h >= 44), 'buttons at least 44 px high', m.buttons);
    });

    await sc.step('phone: a student who moved on (Tab from the heading) keeps the focus at ready', async () => {
      await page.tap(`#lesson-list li[data-lesson="${LESSON}"] button.start`);
      await page.waitForSelector('#view-starting:not([hidden]), #view-lab:not([hidden])', { timeout: 20000 });
      if (await page.isVisible('#view-starting')) {
        await page.keyboard.press('Tab');      // to Cancel: moved on
        await page.waitForSelector('#view-lab:not([hidden])', { timeout: 60000 });
        await page.waitForSelector('#terminal .xterm', { timeout: 20000 });
        await page.waitForTimeout(300);
        assert((await active(page)) !== 'terminal', 'the terminal did not take the focus', await active(page));
      } else {
        diag('ready before the first poll: no focus check');
      }
      await page.waitForSelector('#conn[data-conn="open"]', { timeout: 20000 });
    });

    await sc.step('phone: the terminal\'s columns fit its box; the bridge is told the size', async () => {
      await waitTerm(page, 'root@', 15000);
      const m = await page.evaluate(() => {
        const term = window.labvm.console.term;
        const box = document.getElementById('terminal').getBoundingClientRect();
        const screen = document.querySelector('#terminal .xterm-screen').getBoundingClientRect();
        return { cols: term.cols, rows: term.rows, box: [box.left, box.right], screen: [screen.left, screen.right],
          scroll: document.documentElement.scrollWidth, width: window.innerWidth };
      });
      assert(m.cols >= 20 && m.cols < 80, 'fewer than 80 columns on a phone', m);
      assert(m.screen[0] >= m.box[0] - 1 && m.screen[1] <= m.box[1] + 1, 'the columns fit the box', m);
      assert(m.scroll <= m.width, 'no sideways scrolling', m);
      const sizes = frames.map((f) => { try { return JSON.parse(f); } catch (e) { return null; } }).filter((x) => x && x.type === 'resize');
      assert(sizes.length >= 1 && sizes[sizes.length - 1].cols === m.cols && sizes[sizes.length - 1].rows === m.rows,
        'a resize message with the terminal\'s size', { sizes, cols: m.cols, rows: m.rows });
      diag(`phone terminal: ${m.cols}x${m.rows}`);
    });

    await sc.step('phone: the VM\'s shell sees the terminal\'s size (tty-size through the agent)', async () => {
      const want = await page.evaluate(() => `${window.labvm.console.term.rows}x${window.labvm.console.term.cols}`);
      await page.tap('#terminal');
      // The size reaches the API once resizing settles: ask until the shell
      // agrees. The marker is computed by the shell (SZ<n+1000>), so the typed
      // command line never matches it.
      let got = '';
      for (let i = 0; i < 20 && got !== want; i++) {
        await page.keyboard.type(`echo SZ$((${i}+1000))-$(stty size | tr ' ' x)-end`);
        await page.keyboard.press('Enter');
        got = await page.waitForFunction((k) => {
          const b = window.labvm.console.term.buffer.active;
          for (let y = b.baseY + b.cursorY; y >= 0; y--) {
            const m = b.getLine(y).translateToString(true).match(new RegExp(`SZ${k}-(\\d+x\\d+)-end`));
            if (m) return m[1];
          }
          return null;
        }, i + 1000, { timeout: 15000 }).then((h) => h.jsonValue());
        if (got !== want) await page.waitForTimeout(500);
      }
      assert(got === want, 'stty size in the guest = the terminal\'s rows x cols', { got, want });
    });

    await sc.step('phone: after a long command the prompt is in view', async () => {
      await page.tap('#terminal');
      const long = 'echo ' + 'abcdefghij'.repeat(12) + ' && echo long-$((5+5))';
      await page.keyboard.type(long);
      await page.keyboard.press('Enter');
      await waitTerm(page, 'long-10');
      // the prompt (it may wrap: the VM's host name is long) ends at the cursor
      const m = await page.waitForFunction(() => {
        const t = window.labvm.console.term;
        const b = t.buffer.active;
        const cur = b.baseY + b.cursorY;
        let p = cur;
        while (p > cur - 3 && p > 0 && !b.getLine(p).translateToString(true).includes('root@')) p--;
        const text = [];
        for (let i = p; i <= cur; i++) text.push(b.getLine(i).translateToString(true));
        if (!/root@[^\n]*[#$]\s*$/.test(text.join(''))) return null;
        return { promptLine: p, cursorLine: cur, viewportY: b.viewportY, rows: t.rows, cursorX: b.cursorX, cols: t.cols, text };
      }, null, { timeout: 5000 }).then((h) => h.jsonValue())
        .catch(async (e) => { throw new Error(`no prompt at the cursor: ${e.message}`); });
      assert(m.promptLine >= m.viewportY && m.cursorLine < m.viewportY + m.rows, 'the prompt and the cursor are in view', m);
      assert(m.cursorX < m.cols, 'the cursor is within the columns', m);
      const box = await page.evaluate(() => {
        const r = document.querySelector('#terminal .xterm-screen').getBoundingClientRect();
        return { top: r.top, bottom: r.bottom, h: window.innerHeight };
      });
      assert(box.bottom > 0 && box.top < box.h, 'the terminal is on screen', box);
      await page.screenshot({ path: path.join(ART, 'a11y-phone-terminal.png') }).catch(() => {});
    });

    await sc.step('phone: Grade scrolls the result into view', async () => {
      await page.evaluate(() => window.scrollTo(0, 0));
      await page.tap('#grade');
      await page.waitForSelector('#grade-panel[data-result="fail"], #grade-panel[data-result="pass"]', { timeout: 30000 });
      await page.waitForTimeout(300);
      const r = await page.evaluate(() => {
        const b = document.getElementById('grade-summary').getBoundingClientRect();
        return { top: b.top, bottom: b.bottom, h: window.innerHeight };
      });
      assert(r.top >= 0 && r.bottom <= r.h, 'the grade summary is on screen', r);
      await page.screenshot({ path: path.join(ART, 'a11y-phone-grade.png') }).catch(() => {});
    });

    await sc.step('phone: no script errors', async () => {
      assert(problems.length === 0, 'script errors', problems);
    }, { independent: true });
  } finally {
    await endOpenSession(fe.url, user).catch(() => {});
    await ctx.close();
  }
}

/* ------------------------------------------------------------------- main */
for (const sig of ['SIGTERM', 'SIGINT']) {
  process.on(sig, async () => {
    for (const fe of FRONTENDS.filter((f) => f.url)) {
      for (const u of Object.values(USERS)) await endOpenSession(fe.url, u).catch(() => {});
    }
    console.log(`not ok ${tap.n + 1} - interrupted by ${sig}`);
    process.exit(1);
  });
}

async function main() {
  fs.mkdirSync(ART, { recursive: true });
  let browser = null;
  try {
    browser = await launch();
    let fullDone = false;
    for (const fe of FRONTENDS) {
      if (!fe.url) {
        report(true, `${fe.name}: every check # SKIP no ${fe.name} front end in this stack`);
        continue;
      }
      const sc = new Scenario(fe.name);
      await delivery(browser, fe, sc);
      if (fullDone) continue;         // the page is the same behind either front end
      fullDone = true;
      const axeSeen = [];
      await keyboard(browser, fe, new Scenario(`${fe.name} keyboard`), axeSeen);
      diag(`axe ran on: ${axeSeen.join(', ')}`);
      await phone(browser, fe, new Scenario(`${fe.name} phone`));
    }
  } catch (e) {
    report(false, 'the browser runs', e && e.stack ? e.stack : String(e));
  } finally {
    if (browser) await browser.close();
  }
  done();
}

await main();
