// timeout: 300
/* t760: the operator page (web/operator.html) in Chromium, on an extra
 * lighttpd front end whose labvm.conf names `teacher` as an operator
 * (tests/e2e/frontend.py --set operators=teacher):
 *
 *   a student's lab is ready and another's start failed -> the operator sees
 *   today's sessions (user, lesson, stage, age, disk), capacity in use, the
 *   readiness chart and the failure with its stage and error -> ends the
 *   student's session from the page (confirmation) -> it is ended (reason
 *   "operator") and its VM goes -> the page in Japanese -> a student gets
 *   403 from the API and the "operators only" notice on the page; on the
 *   shared stack (no operators configured) even teacher does.
 */
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { ENV, PASSWORD, api as labApi, assert, done, endOpenSession, launch, report } from './lib.mjs';

const HERE = path.dirname(fileURLToPath(import.meta.url));
const SRC = process.env.LABVM_SRC || path.resolve(HERE, '..', '..');
const ART = path.join(HERE, 'artifacts');
const OPERATOR = 'teacher';
const STUDENT = 'student331';
const FAILER = 'student332';
const STACK = ENV.LABVM_LIGHTTPD_URL || ENV.LABVM_URL;
const STACK_BASE = Number(new URL(STACK).port) - 80;
const STATE = path.join(ENV.LABVM_STATE || path.join(SRC, '.check'), 'e2e-operator');

let broken = null;
async function step(name, fn, { independent = false } = {}) {
  if (broken && !independent) {
    report(false, name, `not run: it needs "${broken}", which failed`);
    return;
  }
  const t0 = Date.now();
  try {
    await fn();
    report(true, `${name} (${((Date.now() - t0) / 1000).toFixed(1)}s)`);
  } catch (e) {
    if (!independent) broken = name;
    report(false, name, e && e.stack ? e.stack : String(e));
  }
}

/* labvm's API; the answer's JSON as json */
async function api(base, user, method, p, body) {
  const r = await labApi(base, user, method, p, body);
  return { status: r.status, json: r.data };
}

const endOpen = endOpenSession;

async function waitState(base, user, sid, states, ms) {
  const end = Date.now() + ms;
  let last = null;
  while (Date.now() < end) {
    last = await api(base, user, 'GET', `/api/sessions/${sid}`);
    if (last.status === 200 && states.includes(last.json.state)) return last.json;
    await new Promise((r) => setTimeout(r, 200));
  }
  throw new Error(`session ${sid} not in ${states} after ${ms} ms: ${JSON.stringify(last && last.json)}`);
}

function frontEnd(action) {
  const args = [path.join(HERE, 'frontend.py'), action, '--state', STATE];
  if (action === 'up') args.push('--frontend', 'lighttpd', '--port-base', String(STACK_BASE + 680), '--set', `operators=${OPERATOR}`);
  const r = spawnSync('/usr/bin/python3', args, { encoding: 'utf8', env: ENV, timeout: 60000 });
  if (action === 'up' && r.status !== 0) throw new Error(`extra front end did not start: ${r.stderr}`);
  return (r.stdout || '').trim().split('\n').pop();
}

async function newContext(browser, user, locale = 'en-US') {
  const ctx = await browser.newContext({ httpCredentials: { username: user, password: PASSWORD },
    viewport: { width: 1400, height: 1000 }, locale });
  await ctx.addInitScript(() => {
    window.__csp = [];
    document.addEventListener('securitypolicyviolation', (e) => window.__csp.push(`${e.violatedDirective} ${e.blockedURI}`));
  });
  return ctx;
}

async function main() {
  fs.mkdirSync(ART, { recursive: true });
  let browser = null;
  let base = null;
  let sid = null;
  for (const sig of ['SIGTERM', 'SIGINT']) process.on(sig, () => { frontEnd('down'); process.exit(1); });
  try {
    frontEnd('down');
    base = frontEnd('up');
    browser = await launch();

    await step('a ready lab and a failed start to look at', async () => {
      for (const u of [STUDENT, FAILER]) await endOpen(base, u);
      let r = await api(base, STUDENT, 'POST', '/api/sessions', { lesson: 'linux-basics' });
      assert(r.status === 201, 'start', r);
      sid = r.json.id;
      r = await api(base, FAILER, 'POST', '/api/sessions', { lesson: 'broken-setup' });
      assert(r.status === 201, 'start broken-setup', r);
      await waitState(base, STUDENT, sid, ['ready'], 60000);
      await waitState(base, FAILER, r.json.id, ['failed'], 90000);
    });

    let page = null;
    await step('the operator sees sessions, capacity, the readiness chart and failures', async () => {
      const ctx = await newContext(browser, OPERATOR);
      page = await ctx.newPage();
      await page.goto(`${base}/operator.html`);
      await page.waitForSelector('#view-main:not([hidden])', { timeout: 15000 });
      const row = page.locator(`#sessions tr[data-id="${sid}"]`);
      await row.waitFor({ timeout: 10000 });
      const cells = await row.locator('td').allTextContents();
      assert(cells[0] === STUDENT && cells[1] === 'linux-basics', 'user and lesson', cells);
      assert(cells[2] === 'ready / ready', 'state / stage', cells);
      assert(/\d+ (s|min)/.test(cells[3]), 'age', cells);
      assert(cells[4].length > 0, 'disk source', cells);
      const inUse = Number(await page.textContent('#cap-in-use'));
      const limit = Number(await page.textContent('#cap-limit'));
      assert(inUse >= 1 && limit >= inUse, 'capacity in use', { inUse, limit });
      const bars = await page.locator('#readiness-svg rect').count();
      assert(bars >= 12, 'the readiness chart has its bars', bars);
      const tall = await page.$$eval('#readiness-svg rect', (rs) => rs.filter((r) => Number(r.getAttribute('data-n')) > 0).length);
      assert(tall >= 1, 'some bar shows starts', tall);
      assert(/ready: \d+ \(median [\d.]+ s/.test(await page.textContent('#rd-summary')), 'a readiness summary');
      const fail = page.locator('#failures tbody tr').filter({ hasText: FAILER }).first();
      await fail.waitFor({ timeout: 10000 });
      const fc = await fail.locator('td').allTextContents();
      assert(fc[3] === 'setting up' && /exit code/.test(fc[4]), 'the failure with its stage and error', fc);
      assert(!(await page.isDisabled('#warm-button')), 'warm a lesson: the button works');
      const csp = await page.evaluate(() => window.__csp);
      assert(csp.length === 0, 'no CSP violation', csp);
      await page.screenshot({ path: path.join(ART, 'operator-en.png'), fullPage: true });
    });

    await step('the operator warms a lesson for a class from the page', async () => {
      await page.goto(`${base}/operator.html`);
      await page.waitForSelector('#view-main:not([hidden])', { timeout: 15000 });
      await page.fill('#warm-lesson', 'linux-basics');
      await page.fill('#warm-count', '1');
      await page.click('#warm-button');
      await page.waitForFunction(() => /Warming linux-basics/.test(document.querySelector('#warm-result').textContent), null, { timeout: 15000 });
      await page.locator('#warm-lessons li[data-lesson="linux-basics"]').waitFor({ timeout: 15000 });
      const line = await page.textContent('#warm-lessons li[data-lesson="linux-basics"]');
      assert(/target 1/.test(line), 'the pool of the lesson is listed', line);
      const pool = await api(base, OPERATOR, 'GET', '/api/operator/pool');
      const w = (pool.json.warm || []).filter((x) => x.lesson === 'linux-basics' && x.created_by === OPERATOR);
      assert(w.length === 1 && w[0].count === 1, 'one warm request of the operator', pool.json.warm);
      for (const x of w) await api(base, OPERATOR, 'DELETE', `/api/operator/pool/${x.id}`);
      await api(base, OPERATOR, 'GET', '/api/operator/pool'); // its VM goes (surplus)
    }, { independent: true });

    await step('the operator ends the session from the page', async () => {
      page.once('dialog', (d) => d.accept());
      await page.click(`#sessions tr[data-id="${sid}"] button.end`);
      await page.waitForFunction((id) => {
        const td = document.querySelector(`#sessions tr[data-id="${id}"] td.stage`);
        return td && td.textContent.startsWith('ended');
      }, sid, { timeout: 15000 });
      const r = await api(base, STUDENT, 'GET', `/api/sessions/${sid}`);
      assert(r.json.state === 'ended' && r.json.end_reason === 'operator', 'ended by the operator', r.json);
      assert(await page.locator(`#sessions tr[data-id="${sid}"] button.end`).count() === 0, 'no End button on an ended session');
    });

    await step('the page in Japanese', async () => {
      const ctx = await newContext(browser, OPERATOR, 'ja-JP');
      const p = await ctx.newPage();
      await p.goto(`${base}/operator.html`);
      await p.waitForSelector('#view-main:not([hidden])', { timeout: 15000 });
      assert((await p.textContent('h1')).includes('オペレーター'), 'title', await p.textContent('h1'));
      assert((await p.textContent('#capacity h2')) === '容量', 'capacity heading');
      assert((await p.getAttribute('html', 'lang')) === 'ja', 'lang=ja');
      const stage = await p.locator(`#sessions tr[data-id="${sid}"] td.stage`).textContent();
      assert(stage.startsWith('終了'), 'states in Japanese', stage);
      await p.screenshot({ path: path.join(ART, 'operator-ja.png'), fullPage: true });
      await p.click('button[data-lang="en"]');
      assert((await p.textContent('#capacity h2')) === 'Capacity', 'switches back to English');
      await ctx.close();
    }, { independent: true });

    await step('a student gets 403 from the API and "operators only" on the page', async () => {
      let r = await api(base, STUDENT, 'GET', '/api/operator/overview');
      assert(r.status === 403 && r.json.error === 'forbidden', 'overview', r);
      r = await api(base, STUDENT, 'POST', `/api/operator/sessions/${sid}/end`, {});
      assert(r.status === 403, 'end', r);
      r = await api(STACK, OPERATOR, 'GET', '/api/operator/overview');
      assert(r.status === 403, 'teacher on the shared stack, which names no operator', r);
      const ctx = await newContext(browser, STUDENT);
      const p = await ctx.newPage();
      await p.goto(`${base}/operator.html`);
      await p.waitForSelector('#view-forbidden:not([hidden])', { timeout: 15000 });
      assert(await p.isHidden('#view-main'), 'nothing of the operator view');
      assert((await p.locator('#sessions tbody tr').count()) === 0, 'no session listed');
      await ctx.close();
    }, { independent: true });
  } catch (e) {
    report(false, 'the browser runs', e && e.stack ? e.stack : String(e));
  } finally {
    if (base) for (const u of [STUDENT, FAILER]) await endOpen(base, u).catch(() => {});
    if (browser) await browser.close();
    frontEnd('down');
  }
  done();
}

await main();
