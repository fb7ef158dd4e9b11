/* t790_guide.mjs - the lesson guide renderer (web/guide.js with the vendored
 * markdown-it) in Chromium, on the student page as each front end serves it
 * (lighttpd and Apache: their Content-Security-Policy, their /guides/):
 *
 *   - the hostile test guide (tests/lessons/guides/test-guide) renders inert:
 *     no script runs (a global flag stays unset, no CSP violation is
 *     reported), no request leaves the page's origin, javascript:, data:,
 *     vbscript:, file: and //host links are not links, raw HTML is text, only
 *     the guide folder's images load; its SVG with a script, opened on its
 *     own from /guides/, runs nothing either;
 *   - a 2 MB guide (make-big-guide.py) renders (the time is printed, not
 *     asserted);
 *   - axe-core finds 0 violations on linux-basics' guide, in English and in
 *     Japanese;
 *   - keyboard only: Tab reaches every Copy, Run in terminal, hint and
 *     result; Enter copies the block, runs it (the page's onRun gets the
 *     machine and the exact text), opens a hint (onHint); a grade's answer
 *     puts a tick or a cross on each Check heading, the output on demand.
 *
 * Here the page's part is played by the test, which loads guide.js as the
 * page does; the guide in the lab view (beside the terminal, Run in terminal
 * typing into the console) is t795_guide_lab.mjs.
 */
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';
import { ENV, PASSWORD, Scenario, assert, diag, done, launch, watchPage } from './lib.mjs';

const HERE = path.dirname(fileURLToPath(import.meta.url));
const SRC = path.resolve(HERE, '..', '..');
const AXE = fs.readFileSync(createRequire(import.meta.url).resolve('axe-core/axe.min.js'), 'utf8');
const FRONTENDS = [
  { name: 'lighttpd', url: ENV.LABVM_LIGHTTPD_URL || (ENV.LABVM_APACHE_URL ? null : ENV.LABVM_URL), user: 'student85' },
  { name: 'apache', url: ENV.LABVM_APACHE_URL, user: 'student86' },
].filter((f) => f.url);
const BIG = execFileSync('/usr/bin/python3', [path.join(SRC, 'tests', 'lessons', 'guides', 'make-big-guide.py'),
  '--steps', 'passes,fails with output'], { encoding: 'utf8', maxBuffer: 16 << 20 });
const LINUX = JSON.parse(fs.readFileSync(path.join(SRC, 'conf', 'lessons', 'linux-basics.json'), 'utf8'));

/* The page with guide.js, guide.css and markdown-it loaded the way app.js
 * loads xterm.js (vendor/manifest.json), and a host for the guide in the
 * lessons view. Records every request and every CSP violation. */
async function openPage(browser, fe) {
  const ctx = await browser.newContext({ httpCredentials: { username: fe.user, password: PASSWORD },
    viewport: { width: 1200, height: 900 } });
  await ctx.grantPermissions(['clipboard-read', 'clipboard-write'], { origin: fe.url });
  const page = await ctx.newPage();
  const problems = [];
  watchPage(page, problems);
  const requests = [];
  page.on('request', (r) => requests.push(r.url()));
  await page.addInitScript(() => {
    window.__csp = [];
    document.addEventListener('securitypolicyviolation', (e) => window.__csp.push(`${e.violatedDirective} ${e.blockedURI}`));
  });
  await page.goto(fe.url + '/');
  await page.waitForSelector('#lesson-list li[data-lesson] button.start');
  await page.evaluate(async () => {
    const m = await (await fetch('/vendor/manifest.json', { cache: 'no-cache' })).json();
    const load = (tag, attrs) => new Promise((ok, bad) => {
      const e = document.createElement(tag);
      Object.assign(e, attrs);
      e.onload = ok;
      e.onerror = () => bad(new Error(attrs.src || attrs.href));
      document.head.append(e);
    });
    await load('link', { rel: 'stylesheet', href: '/guide.css' });
    await load('script', { src: m['markdown-it.umd.min.js'], async: false });
    await load('script', { src: '/guide.js', async: false });
    const host = document.createElement('div');
    host.id = 'guide-host';
    document.getElementById('view-lessons').append(host);
    window.__runs = [];
    window.__hints = 0;
  });
  return { ctx, page, problems, requests };
}

/* Render lesson's guide (from the API) into the host: the render's stats. */
function show(page, lesson, lang, machines = []) {
  return page.evaluate(async ({ lesson, lang, machines }) => {
    if (window.__guide) window.__guide.destroy();
    const g = await window.LabGuide.fetch(lesson, lang);
    window.__guide = window.LabGuide.create(document.getElementById('guide-host'), {
      lang, folder: g.folder, machines,
      onRun: (m, t) => window.__runs.push([m, t]),
      onHint: () => { window.__hints++; },
    });
    return Object.assign(window.__guide.render(g.markdown), { served: g.lang });
  }, { lesson, lang, machines });
}

/* Tab from the top of the guide until el matches, at most n presses: the focused element's description. */
async function tabTo(page, selector, n = 80) {
  for (let i = 0; i < n; i++) {
    await page.keyboard.press('Tab');
    if (await page.evaluate((s) => document.activeElement && document.activeElement.matches(s), selector)) {
      return page.evaluate(() => document.activeElement.outerHTML.slice(0, 200));
    }
  }
  throw new Error(`${selector}: not reached with ${n} Tabs`);
}

async function focusGuideStart(page) {
  // the element right before the guide: the lesson list's last Start button
  await page.evaluate(() => {
    const b = [...document.querySelectorAll('#lesson-list button.start')].pop();
    b.focus();
  });
}

async function scenario(browser, fe) {
  const sc = new Scenario(fe.name);
  const { ctx, page, problems, requests } = await openPage(browser, fe);
  const origin = new URL(fe.url).origin;
  try {
    await sc.step('the hostile guide renders inert: no script, no CSP violation, raw HTML as text', async () => {
      const st = await show(page, 'test-guide', 'ja');
      assert(st.served === 'en', 'no Japanese guide: the English one', st);
      // the images load lazily: bring each into view
      for (let i = 0; i < await page.locator('#guide-host img').count(); i++) {
        await page.locator('#guide-host img').nth(i).scrollIntoViewIfNeeded();
      }
      await page.waitForFunction(() => [...document.querySelectorAll('#guide-host img')].every((i) => i.complete));
      await new Promise((r) => setTimeout(r, 500));
      const v = await page.evaluate(() => {
        const host = document.getElementById('guide-host');
        const bad = [...host.querySelectorAll('*')].filter((e) => [...e.attributes].some((a) => /^on/i.test(a.name)) ||
          /^(SCRIPT|IFRAME|STYLE|FORM|SVG|OBJECT|EMBED|INPUT|BUTTON)$/i.test(e.tagName) && !e.matches('button.labguide-copy, button.labguide-run'));
        return { pwned: window.__pwned, csp: window.__csp, bad: bad.map((e) => e.outerHTML.slice(0, 120)),
          text: host.textContent, hidden: getComputedStyle(document.body).display };
      });
      assert(v.pwned === undefined, 'window.__pwned stays unset', v.pwned);
      assert(v.csp.length === 0, 'no CSP violation', v.csp);
      assert(v.bad.length === 0, 'no script, frame, style, form or event attribute in the guide', v.bad);
      assert(v.hidden !== 'none', 'the raw <style> did not apply');
      for (const s of ["<script>window.__pwned = 'script-block'</script>", 'onerror="window.__pwned = \'img-onerror\'"',
        '<iframe src=', '<svg onload=']) {
        assert(v.text.includes(s), `shown as text: ${s}`);
      }
    });

    await sc.step('links: javascript:, data:, vbscript:, file:, //host, /site and .. are not links; https opens apart, relative ones in the folder', async () => {
      const links = await page.evaluate(() => [...document.querySelectorAll('#guide-host a')].map((a) => ({
        href: a.getAttribute('href'), text: a.textContent, target: a.target, rel: a.rel })));
      for (const l of links) {
        assert(/^(https?:\/\/|\/guides\/test-guide\/|#guide-)/.test(l.href), 'only http(s), the folder or this page', l);
        if (/^https?:/.test(l.href)) assert(l.target === '_blank' && l.rel === 'noopener noreferrer', 'apart, no opener', l);
      }
      const texts = links.map((l) => l.text);
      for (const t of ['js link', 'JS in capitals', 'js with an entity', 'data link', 'vbscript link', 'file link',
        'protocol-relative', 'absolute path', 'up and out', 'reference js', 'a raw anchor']) {
        assert(!texts.includes(t), `"${t}" is not a link`, links);
      }
      assert(texts.includes('an https link') && texts.includes('a note next to the guide') && texts.includes('this page'),
        'the good links stay', texts);
      const note = links.find((l) => l.text === 'a note next to the guide');
      assert(note.href === '/guides/test-guide/notes.txt', 'a relative link in the guide folder', note);
      const hash = links.find((l) => l.text === 'this page');
      const target = await page.evaluate((h) => !!document.getElementById(h.slice(1)), hash.href);
      assert(target, 'the in-page link reaches its heading', hash);
    });

    await sc.step('images: only the guide folder\'s; none from elsewhere, no data:, no request to another origin', async () => {
      const imgs = await page.evaluate(() => [...document.querySelectorAll('#guide-host img')].map((i) => ({
        src: i.getAttribute('src'), alt: i.alt, ok: i.naturalWidth > 0 })));
      assert(imgs.length === 2, 'two images (diagram.svg and evil.svg)', imgs);
      for (const i of imgs) assert(i.src.startsWith('/guides/test-guide/') && i.ok, 'from the folder, loaded', i);
      const outside = requests.filter((u) => new URL(u).origin !== origin);
      assert(outside.length === 0, 'no request to another origin', outside);
      const fetched = requests.filter((u) => u.includes('/guides/')).map((u) => new URL(u).pathname);
      assert(fetched.every((p) => p.startsWith('/guides/test-guide/')), 'nothing outside the guide folder', fetched);
    });

    await sc.step('the SVG with a script, opened on its own from /guides/, runs nothing (sandboxed CSP)', async () => {
      const p2 = await ctx.newPage();
      const seen = [];
      p2.on('request', (r) => seen.push(r.url()));
      await p2.goto(fe.url + '/guides/test-guide/evil.svg');
      await new Promise((r) => setTimeout(r, 500));
      const pwned = await p2.evaluate(() => window.__pwned);
      await p2.close();
      assert(pwned === undefined, 'no script ran in the SVG', pwned);
      assert(seen.every((u) => new URL(u).origin === origin), 'its fetch to another origin never left', seen);
    });

    await sc.step('a 2 MB guide renders (time printed, not asserted)', async () => {
      const st = await page.evaluate((md) => {
        window.__guide.destroy();
        window.__guide = window.LabGuide.create(document.getElementById('guide-host'), { lang: 'en', folder: '/guides/test-guide/' });
        const t0 = performance.now();
        const s = window.__guide.render(md);
        s.total = performance.now() - t0;
        s.nodes = document.querySelectorAll('#guide-host *').length;
        return s;
      }, BIG);
      assert(st.bytes === BIG.length && st.runs > 1000 && st.hints === st.runs && st.checks === 2, 'all of it rendered', st);
      diag(`${fe.name}: 2 MB guide (${(BIG.length / 1e6).toFixed(2)} MB, ${st.runs} run blocks, ${st.nodes} elements) rendered in ${Math.round(st.total)} ms (${JSON.stringify(st.phases)})`);
      const v = await page.evaluate(() => ({ pwned: window.__pwned, csp: window.__csp }));
      assert(v.pwned === undefined && v.csp.length === 0, 'still inert', v);
    });

    for (const lang of ['en', 'ja']) {
      await sc.step(`axe: 0 violations on linux-basics' guide (${lang}), graded and not`, async () => {
        const st = await show(page, 'linux-basics', lang);
        assert(st.served === lang && st.checks === 8, `the ${lang} guide with its 8 checks`, st);
        if (!(await page.evaluate(() => !!window.axe))) await page.evaluate(AXE);
        const run = () => page.evaluate(async () => {
          const r = await window.axe.run({ include: ['#guide-host'] }, { resultTypes: ['violations'] });
          return r.violations.map((x) => `${x.id} (${x.impact}): ${x.nodes.slice(0, 3).map((n) => n.target.join(' ')).join(' | ')}`);
        });
        const before = await run();
        await page.evaluate((steps) => {
          window.__guide.setResults({ steps: steps.map((s, i) => ({ name: s.name, i18n: s.i18n, machine: null,
            passed: i % 2 === 0, exit_code: i % 2 ? 1 : 0, timed_out: false, output: i % 2 ? `step ${i} failed` : '' })) });
          document.querySelectorAll('#guide-host details').forEach((d) => { d.open = true; });
        }, LINUX.grader);
        const after = await run();
        assert(before.length === 0 && after.length === 0, 'axe violations', '\n' + before.concat(after).join('\n'));
        const land = await page.evaluate(() => {
          const s = document.querySelector('#guide-host .labguide');
          return { tag: s.tagName, label: s.getAttribute('aria-label'), lang: s.lang };
        });
        assert(land.tag === 'SECTION' && land.label && land.lang === lang, 'a named region in its language', land);
      });
    }

    await sc.step('keyboard only: Tab to Copy, Enter copies the block exactly', async () => {
      await show(page, 'linux-basics', 'en');
      await focusGuideStart(page);
      const got = await tabTo(page, '#guide-host button.labguide-copy');
      const want = await page.evaluate(() => document.activeElement.closest('.labguide-code').querySelector('pre').textContent.replace(/\n$/, ''));
      await page.keyboard.press('Enter');
      await page.waitForFunction(() => document.activeElement.textContent === 'Copied');
      const clip = await page.evaluate(() => navigator.clipboard.readText());
      assert(clip === want && want === 'cd /root/lab\nls -l', 'the clipboard holds the block', { clip, want, got });
      const live = await page.textContent('#guide-host .labguide-sr[role="status"]');
      assert(live === 'Copied', 'and it is said', live);
    });

    await sc.step('keyboard only: Tab to Run in terminal, Enter hands (machine, text) to the page, nothing else', async () => {
      await tabTo(page, '#guide-host button.labguide-run');
      const name = await page.evaluate(() => document.activeElement.textContent);
      assert(name === 'Run in terminal', 'the button is named', name);
      await page.keyboard.press('Enter');
      await page.keyboard.press('Space');
      const runs = await page.evaluate(() => window.__runs);
      assert(runs.length === 2 && runs.every((r) => r[0] === null && r[1] === 'cd /root/lab\nls -l'), 'onRun(null, text) twice', runs);
      // a multi-machine guide names the machine, in the button's name too
      await show(page, 'test-multi', 'ja', ['cp', 'worker1', 'worker2']);
      await focusGuideStart(page);
      await tabTo(page, '#guide-host button.labguide-run[data-machine="worker2"]');
      const label = await page.evaluate(() => document.activeElement.getAttribute('aria-label'));
      assert(label === 'ターミナルで実行: worker2', 'its name says the machine (Japanese)', label);
      await page.keyboard.press('Enter');
      const last = await page.evaluate(() => window.__runs[window.__runs.length - 1]);
      assert(last[0] === 'worker2' && last[1] === 'echo 42 > /root/answer', 'onRun("worker2", text)', last);
    });

    await sc.step('keyboard only: a hint opens with Enter (onHint) and shows its text', async () => {
      await show(page, 'linux-basics', 'en');
      await focusGuideStart(page);
      await tabTo(page, '#guide-host details.labguide-hint > summary');
      const before = await page.evaluate(() => window.__hints);
      await page.keyboard.press('Enter');
      await page.waitForFunction((b) => window.__hints === b + 1, before);
      const open = await page.evaluate(() => document.activeElement.parentElement.open &&
        document.activeElement.parentElement.textContent.includes('grep -qx hello /root/hello.txt'));
      assert(open, 'the hint is open and says what the grader runs');
    });

    await sc.step('ticks: a grade marks each Check heading; Tab to a result, Enter shows the step\'s output', async () => {
      const marks = await page.evaluate((steps) => {
        window.__guide.setResults({ passed: 7, total: 8, steps: steps.map((s) => ({ name: s.name, i18n: s.i18n, machine: null,
          passed: s.name !== 'user student exists', exit_code: s.name === 'user student exists' ? 1 : 0, timed_out: false,
          output: s.name === 'user student exists' ? "id: 'student': no such user" : '' })) });
        return [...document.querySelectorAll('#guide-host .labguide-check')].map((h) => [h.textContent, h.dataset.passed,
          h.querySelector('.labguide-mark').dataset.state]);
      }, LINUX.grader);
      assert(marks.length === 8, 'eight Check headings', marks);
      assert(marks.filter((m) => m[2] === 'pass').length === 7 && marks.filter((m) => m[2] === 'fail').length === 1, '7 ticks, 1 cross', marks);
      const failed = marks.find((m) => m[2] === 'fail');
      assert(/failed: user student exists/.test(failed[0]), 'the cross is said in words', failed);
      await focusGuideStart(page);
      await tabTo(page, '#guide-host .labguide-check[data-passed="false"] + details.labguide-result > summary', 120);
      const sum = await page.evaluate(() => document.activeElement.textContent);
      assert(sum === 'Result: failed (exit code 1)', 'the result summary', sum);
      await page.keyboard.press('Enter');
      const out = await page.evaluate(() => document.activeElement.parentElement.open &&
        document.activeElement.parentElement.querySelector('pre').textContent);
      assert(out === "id: 'student': no such user", 'the output on demand', out);
      await page.evaluate(() => window.__guide.setResults(null));
      const cleared = await page.evaluate(() => [...document.querySelectorAll('#guide-host .labguide-mark')].every((m) => m.dataset.state === 'none'));
      assert(cleared, 'setResults(null) clears them');
    });

    await sc.step('no script errors on the page', async () => {
      assert(problems.length === 0, 'script errors', problems);
      const outside = requests.filter((u) => new URL(u).origin !== origin);
      assert(outside.length === 0, 'no request to another origin, all along', outside);
    }, { independent: true });
  } finally {
    await ctx.close();
  }
}

const browser = await launch();
try {
  for (const fe of FRONTENDS) await scenario(browser, fe);
} finally {
  await browser.close();
}
done();
