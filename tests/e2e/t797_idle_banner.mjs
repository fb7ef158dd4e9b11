// timeout: 400
/* t797: an idle lab on the student page (issue #28), in Chromium through
 * lighttpd and through Apache. The test lesson test-idle ends after 12 s
 * without activity; the stack warns 4 s before (idle_warning_s 4).
 *
 *   - the lab sits untouched: the banner appears ("Are you still there?",
 *     a countdown, "I'm still here"), announced (role=alert), nothing typed
 *     into the terminal; axe finds 0 violations on it, in English and
 *     Japanese;
 *   - "I'm still here" keeps the lab: the banner goes, the idle end moves
 *     later (the API agrees), the session stays ready;
 *   - ignored, the lab ends: the ended view says why (idle), in Japanese and
 *     in English, and offers Start again, which starts the lesson anew.
 * No timing is asserted: each step waits for what it expects. */
import fs from 'node:fs';
import { createRequire } from 'node:module';
import {
  ENV, PASSWORD, api, assert, done, endOpenSession as endOpen, launch, report, termText,
} from './lib.mjs';

const AXE = fs.readFileSync(createRequire(import.meta.url).resolve('axe-core/axe.min.js'), 'utf8');
const LESSON = 'test-idle';
const FRONTENDS = [
  { name: 'lighttpd', url: ENV.LABVM_LIGHTTPD_URL || (ENV.LABVM_APACHE_URL ? null : ENV.LABVM_URL), user: 'student430' },
  { name: 'apache', url: ENV.LABVM_APACHE_URL, user: 'student431' },
].filter((f) => f.url);

async function axeBanner(page) {
  if (!(await page.evaluate(() => !!window.axe))) await page.evaluate(AXE);
  return page.evaluate(async () => {
    const r = await window.axe.run({ include: ['#idle-banner'] }, { resultTypes: ['violations'] });
    return r.violations.map((x) => `${x.id} (${x.impact}): ${x.nodes.slice(0, 3).map((n) => n.target.join(' ')).join(' | ')}`);
  });
}

const banner = (page, kind) => page.waitForSelector(`#idle-banner:not([hidden])[data-kind="${kind}"]`, { timeout: 60000 });

async function scenario(browser, fe) {
  let broken = null;
  const step = async (name, fn) => {
    if (broken) { report(false, `${fe.name}: ${name}`, `not run: needs "${broken}"`); return; }
    try { await fn(); report(true, `${fe.name}: ${name}`); } catch (e) { report(false, `${fe.name}: ${name}`, e.stack); broken = name; }
  };
  const base = fe.url;
  await endOpen(base, fe.user);
  const ctx = await browser.newContext({ httpCredentials: { username: fe.user, password: PASSWORD },
    viewport: { width: 1300, height: 900 }, locale: 'en-US' });
  const page = await ctx.newPage();
  const problems = [];
  page.on('pageerror', (e) => problems.push(e.message));
  let sid = null;
  try {
    await step('start the idle lesson: the lab view, no banner yet', async () => {
      await page.goto(base + '/');
      await page.click(`#lesson-list li[data-lesson="${LESSON}"] button.start`);
      await page.waitForSelector('#view-lab:not([hidden])', { timeout: 60000 });
      sid = await page.evaluate(() => window.labvm.state.session.id);
      const s = await api(base, fe.user, 'GET', `/api/sessions/${sid}`);
      assert(s.data.state === 'ready' && s.data.idle_ends_at, 'ready, with an idle end', s.data);
      assert(s.data.warning === null ? await page.isHidden('#idle-banner') : true, 'no banner before the warning');
    });
    await step('untouched: the banner, its countdown and "I\'m still here", announced; axe finds nothing', async () => {
      await banner(page, 'idle');
      const title = await page.textContent('#idle-banner-title');
      assert(title === 'Are you still there?', 'the idle title', title);
      assert(await page.isVisible('#idle-stay') && await page.isHidden('#idle-extend'), 'I\'m still here, not Extend');
      const cd = await page.textContent('#idle-countdown');
      assert(/\d/.test(cd), 'a countdown', cd);
      await page.waitForFunction(() => document.querySelector('#idle-live').textContent.includes('still here'),
        null, { timeout: 5000 });
      const term = await termText(page);
      assert(!/still there|still here/i.test(term), 'nothing written into the terminal', term.slice(-200));
      const v = await axeBanner(page);
      assert(v.length === 0, 'axe: 0 violations on the banner (en)', v);
    });
    await step('"I\'m still here" keeps the lab: the banner goes, the idle end moves later', async () => {
      const before = (await api(base, fe.user, 'GET', `/api/sessions/${sid}`)).data;
      await page.click('#idle-stay');
      await page.waitForSelector('#idle-banner[hidden]', { state: 'attached', timeout: 10000 });
      const after = (await api(base, fe.user, 'GET', `/api/sessions/${sid}`)).data;
      assert(after.state === 'ready', 'still ready', after);
      assert(Date.parse(after.idle_ends_at) > Date.parse(before.idle_ends_at || 0), 'the idle end moved later',
        [before.idle_ends_at, after.idle_ends_at]);
    });
    await step('in Japanese: the banner again, translated; axe finds nothing', async () => {
      await page.click('#lang-switch button[data-lang="ja"]');
      await banner(page, 'idle');
      await page.waitForFunction(() => document.querySelector('#idle-banner-title').textContent === 'まだ作業中ですか？',
        null, { timeout: 5000 });
      const stay = await page.textContent('#idle-stay');
      assert(stay === '作業を続ける', 'the button in Japanese', stay);
      const v = await axeBanner(page);
      assert(v.length === 0, 'axe: 0 violations on the banner (ja)', v);
    });
    await step('ignored: the lab ends; the ended view says why (ja, then en) and offers Start again', async () => {
      await page.waitForSelector('#app[data-view="ended"]', { timeout: 60000 });
      const ja = await page.textContent('#ended-text');
      assert(ja.includes('しばらく操作がなかった'), 'the reason in Japanese', ja);
      const s = (await api(base, fe.user, 'GET', `/api/sessions/${sid}`)).data;
      assert(s.state === 'ended' && s.end_reason === 'idle', 'ended for idleness', s);
      await page.click('#lang-switch button[data-lang="en"]');
      await page.waitForFunction(() => document.querySelector('#ended-text').textContent.includes('nobody used it'),
        null, { timeout: 5000 });
      assert(await page.isVisible('#ended-again'), 'Start again is offered');
      assert((await page.getAttribute('#view-ended', 'data-reason')) === 'idle', 'data-reason idle');
    });
    await step('Start again starts the lesson anew', async () => {
      await page.click('#ended-again');
      await page.waitForSelector('#view-lab:not([hidden])', { timeout: 60000 });
      const id = await page.evaluate(() => window.labvm.state.session.id);
      assert(id && id !== sid, 'a new session', id);
      const r = await api(base, fe.user, 'DELETE', `/api/sessions/${id}`);
      assert(r.status === 200, 'ended again', r.status);
    });
    report(problems.length === 0, `${fe.name}: no script errors`, problems.join('\n'));
  } finally {
    await ctx.close();
    await endOpen(base, fe.user);
  }
}

async function main() {
  const browser = await launch();
  try {
    for (const fe of FRONTENDS) await scenario(browser, fe);
  } finally {
    await browser.close();
  }
  done();
}

main().catch((e) => { report(false, 'the scenario ran', e.stack); done(); });
