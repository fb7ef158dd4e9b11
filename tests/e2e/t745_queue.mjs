// timeout: 300
/* t745: the waiting line on the student page (Chromium, lighttpd). Every
 * seat is taken (8 sessions started through the API); a student presses
 * Start, sees "all lab machines are in use" with "Wait in line", joins; the
 * page shows the position ("1st in line", "2nd in line" for a second
 * student, "1番目" in Japanese), the likely start and the bound; the second
 * student leaves the line with the button; when one seat frees the first
 * student's page moves on to the start stages by itself, and on to the lab. */
import {
  ENV, PASSWORD, api as labApi, assert, done, endOpenSession, launch, report, step,
} from './lib.mjs';

const BASE = ENV.LABVM_LIGHTTPD_URL || ENV.LABVM_URL;
const LESSON = 'linux-basics';
const HOLDERS = Array.from({ length: 8 }, (_, i) => `student${282 + i}`);
const USERS = ['student280', 'student281'];

const api = (user, method, p, body) => labApi(BASE, user, method, p, body);
const endOpen = (user) => endOpenSession(BASE, user);
const text = (page, sel) => page.$eval(sel, (e) => e.textContent);

async function main() {
  const browser = await launch();
  const problems = [];
  const holders = [];
  try {
    for (const u of [...USERS, ...HOLDERS]) await endOpen(u);
    for (const u of HOLDERS) {
      const r = await api(u, 'POST', '/api/sessions', { lesson: LESSON });
      assert(r.status === 201, `holder ${u} started`, r);
      holders.push([u, r.data.id]);
    }
    const pages = [];
    for (const u of USERS) {
      const ctx = await browser.newContext({ httpCredentials: { username: u, password: PASSWORD },
        viewport: { width: 1200, height: 900 }, locale: 'en-US' });
      const page = await ctx.newPage();
      page.on('pageerror', (e) => problems.push(`${u}: script error: ${e.message}`));
      await page.goto(BASE + '/');
      await page.waitForSelector('#app[data-view="lessons"]', { timeout: 20000 });
      pages.push(page);
    }
    const [a, b] = pages;

    await step('a full lab offers the line beside the retry', async () => {
      await a.click(`#lesson-list button.start[data-lesson="${LESSON}"]`);
      await a.waitForSelector('#lessons-notice:not([hidden]) #notice-queue:not([hidden])', { timeout: 20000 });
      const body = await text(a, '#lessons-notice .notice-body');
      assert(body.includes('wait in line'), 'the notice says the line exists', body);
    });

    await step('joining shows "1st in line", the likely start and the bound', async () => {
      await a.click('#notice-queue');
      await a.waitForSelector('#app[data-view="queued"]', { timeout: 20000 });
      await a.waitForFunction(() => document.querySelector('#queue-position').textContent.includes('1st in line'),
        null, { timeout: 10000 });
      const est = await text(a, '#queue-estimate');
      const bound = await text(a, '#queue-bound');
      assert(/Likely start/.test(est), 'an estimate', est);
      assert(/At the latest/.test(bound), 'the bound', bound);
      const cur = await api(USERS[0], 'GET', '/api/sessions/current');
      assert(cur.data.state === 'queued', 'the API agrees', cur.data);
    });

    await step('a second student is "2nd in line"; in Japanese "2番目"', async () => {
      await b.click(`#lesson-list button.start[data-lesson="${LESSON}"]`);
      await b.waitForSelector('#notice-queue:not([hidden])', { timeout: 20000 });
      await b.click('#notice-queue');
      await b.waitForFunction(() => document.querySelector('#queue-position').textContent.includes('2nd in line'),
        null, { timeout: 10000 });
      await b.click('#lang-switch button[data-lang="ja"]');
      await b.waitForFunction(() => document.querySelector('#queue-position').textContent.includes('2番目'),
        null, { timeout: 5000 });
      const est = await text(b, '#queue-estimate');
      assert(est.includes('開始の見込み'), 'the estimate in Japanese', est);
      await b.click('#lang-switch button[data-lang="en"]');
    });

    await step('"Leave the line" leaves it: back to the lessons', async () => {
      await b.click('#leave-queue');
      await b.waitForSelector('#app[data-view="lessons"]', { timeout: 10000 });
      const cur = await api(USERS[1], 'GET', '/api/sessions/current');
      assert(cur.status === 404, 'no open session any more', cur);
    });

    await step('one seat frees: the page moves on to the start stages by itself, then the lab', async () => {
      const [u, sid] = holders.shift();
      const r = await api(u, 'DELETE', `/api/sessions/${sid}`);
      assert(r.status === 200, 'a holder ended', r);
      await a.waitForSelector('#app[data-view="starting"], #app[data-view="lab"]', { timeout: 30000 });
      await a.waitForSelector('#app[data-view="lab"]', { timeout: 90000 });
      const cur = await api(USERS[0], 'GET', '/api/sessions/current');
      assert(cur.data.state === 'ready', 'the lab is ready', cur.data);
    });

    await step('no script errors', async () => {
      assert(problems.length === 0, 'problems', problems);
    });
  } catch (e) {
    report(false, 'setup', e && e.stack ? e.stack : String(e));
  } finally {
    for (const [u, sid] of holders) await api(u, 'DELETE', `/api/sessions/${sid}`).catch(() => {});
    for (const u of USERS) await endOpen(u).catch(() => {});
    await browser.close();
  }
  done();
}

main();
