// timeout: 400
/* t780: the demo's pod lesson in the student page (Chromium, through lighttpd
 * and through Apache): Start -> the stages -> the terminal is a shell in the
 * lab Pod (labvm-console's exec stream) -> its tty has the terminal's size,
 * and follows when the window shrinks -> Grade fails, the task is done in the
 * terminal, Grade passes (grading by exec) -> End -> the Pod and its Secret
 * are gone. The page never knows the runtime: the same views and messages.
 */
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import {
  ENV, PASSWORD, api, assert, done, endOpenSession as endOpen, launch, report, sim, typeInTerminal as typeIn,
  waitFor, waitTerm,
} from './lib.mjs';

const HERE = path.dirname(fileURLToPath(import.meta.url));
const ART = path.join(HERE, 'artifacts');
const LESSON = 'k8s-pod-intro';
const FRONTENDS = [
  { name: 'lighttpd', url: ENV.LABVM_LIGHTTPD_URL || (ENV.LABVM_APACHE_URL ? null : ENV.LABVM_URL), user: 'student355' },
  { name: 'apache', url: ENV.LABVM_APACHE_URL, user: 'student356' },
];

const termSize = (page) => page.evaluate(() => {
  const t = window.labvm.console && window.labvm.console.term;
  return t ? { cols: t.cols, rows: t.rows } : null;
});

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
  let pod = null;
  try {
    await step('Start the pod lesson: the stages, then the lab view', async () => {
      await page.goto(base + '/');
      await page.click(`#lesson-list li[data-lesson="${LESSON}"] button.start`);
      await page.waitForSelector('#view-lab:not([hidden])', { timeout: 60000 });
      sid = await page.evaluate(() => window.labvm.state.session.id);
      const s = await api(base, fe.user, 'GET', `/api/sessions/${sid}`);
      assert(s.data.runtime === 'pod' && s.data.state === 'ready', 'a ready pod session', s.data);
      pod = s.data.vms[0].name;
    });
    await step('the terminal is a shell in the Pod, with the terminal\'s size', async () => {
      await page.waitForSelector('#conn[data-conn="open"]', { timeout: 20000 });
      await typeIn(page, 'cat /root/README.txt; echo pod-$((6*7)); stty size');
      await waitTerm(page, 'pod-42');
      await waitTerm(page, 'Change the port');
      const sz = await termSize(page);
      assert(sz && sz.cols > 80, 'a pod terminal is not held to 80 columns', sz);
      await waitTerm(page, `${sz.rows} ${sz.cols}`);
      await page.screenshot({ path: path.join(ART, `${fe.name}-pod-terminal.png`) });
    });
    await step('the window shrinks: the tty follows (resize through the exec stream)', async () => {
      const before = await termSize(page);
      await page.setViewportSize({ width: 700, height: 700 });
      const after = await waitFor(async () => {
        const s = await termSize(page);
        return s && (s.cols !== before.cols || s.rows !== before.rows) ? s : null;
      }, 10000, 'the terminal refits');
      await new Promise((r) => setTimeout(r, 300));
      await typeIn(page, 'clear; echo size-is $(stty size)');
      await waitTerm(page, `size-is ${after.rows} ${after.cols}`);
    });
    await step('Grade fails, the task is done in the terminal, Grade passes (by exec)', async () => {
      await page.click('#grade');
      await page.waitForSelector('#grade-panel[data-result="fail"]', { timeout: 30000 });
      const first = await page.textContent('#grade-summary');
      assert(first === '0 of 2 steps passed', 'first grade', first);
      await typeIn(page, "sed -i 's/port = 8080/port = 8081/' /srv/app/app.conf; echo hello > /root/hello.txt; echo done-$((1+1))");
      await waitTerm(page, 'done-2');
      await page.click('#grade');
      await page.waitForFunction(() => document.getElementById('grade-summary').textContent === '2 of 2 steps passed', null, { timeout: 30000 });
      assert((await page.getAttribute('#grade-panel', 'data-result')) === 'pass', 'a pass');
    });
    await step('End: the session ends, the Pod and its Secret go', async () => {
      await page.click('#end');
      await page.click('#end-yes');
      await page.waitForSelector('#view-ended:not([hidden])', { timeout: 30000 });
      const s = await api(base, fe.user, 'GET', `/api/sessions/${sid}`);
      assert(s.data.state === 'ended', 'ended', s.data);
      const ns = ENV.LABVM_NAMESPACE || 'labs';
      await waitFor(async () => (await sim('GET', `/api/v1/namespaces/${ns}/pods/${pod}`)).status === 404, 20000, 'the Pod is gone');
      assert((await sim('GET', `/api/v1/namespaces/${ns}/secrets/${pod}-files`)).status === 404, 'the Secret is gone');
      assert(problems.length === 0, 'no script errors', problems);
    });
  } finally {
    await endOpen(base, fe.user).catch(() => {});
    await ctx.close();
  }
}

fs.mkdirSync(ART, { recursive: true });
const browser = await launch();
try {
  for (const fe of FRONTENDS) {
    if (!fe.url) { report(true, `${fe.name}: the pod lesson # SKIP no ${fe.name} front end`); continue; }
    await scenario(browser, fe);
  }
} finally {
  await browser.close();
}
done();
