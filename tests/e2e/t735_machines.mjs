// timeout: 300
/* t735: a session of several machines on the student page (Chromium,
 * lighttpd): the lab view shows one tab per machine (a tablist, the first
 * selected); each tab's terminal is its own console session on that
 * machine (its own ticket naming the machine: `hostname` answers the
 * machine's name), switching back keeps each terminal's text; arrow keys
 * move between tabs; a single-machine lesson shows no tabs. The grade lists
 * which machine each step ran on (the step's output). */
import fs from 'node:fs';
import { createRequire } from 'node:module';
import {
  ENV, PASSWORD, api as labApi, assert, done, endOpenSession, launch, step,
} from './lib.mjs';

const AXE = fs.readFileSync(createRequire(import.meta.url).resolve('axe-core/axe.min.js'), 'utf8');

const BASE = ENV.LABVM_LIGHTTPD_URL || ENV.LABVM_URL;
const USER = 'student198';

const api = (method, p, body) => labApi(BASE, USER, method, p, body);
const endOpen = () => endOpenSession(BASE, USER);

const paneText = (page, m) => page.evaluate((machine) => {
  const rows = document.querySelector(`#terminal .term-pane[data-machine="${machine}"] .xterm-rows`);
  return rows ? rows.textContent : '';
}, m);

async function typeIn(page, m, text) {
  await page.click(`#terminal .term-pane[data-machine="${m}"]`);
  await page.keyboard.type(text);
  await page.keyboard.press('Enter');
}

async function main() {
  const browser = await launch();
  const problems = [];
  try {
    await endOpen();
    const ctx = await browser.newContext({ httpCredentials: { username: USER, password: PASSWORD },
      viewport: { width: 1400, height: 900 }, locale: 'en-US' });
    const page = await ctx.newPage();
    page.on('pageerror', (e) => problems.push(`script error: ${e.message}`));
    await page.goto(BASE + '/');
    const r = await api('POST', '/api/sessions', { lesson: 'test-multi' });
    assert(r.status === 201, 'started', r);
    await page.reload();
    await page.waitForSelector('#app[data-view="lab"]', { timeout: 60000 });

    await step('the lab view shows one tab per machine, the first selected', async () => {
      await page.waitForSelector('#machine-tabs:not([hidden]) [role="tab"]', { timeout: 10000 });
      const tabs = await page.$$eval('#machine-tabs [role="tab"]', (bs) => bs.map((b) =>
        [b.textContent, b.getAttribute('aria-selected'), b.tabIndex]));
      assert(JSON.stringify(tabs) === JSON.stringify([['cp', 'true', 0], ['worker1', 'false', -1],
        ['worker2', 'false', -1]]), 'tabs', tabs);
      assert(await page.getAttribute('#machine-tabs', 'role') === 'tablist', 'a tablist');
    });

    await step('each tab is its own console on its machine (hostname answers its name)', async () => {
      for (const m of ['cp', 'worker1', 'worker2']) {
        await page.click(`#tab-${m}`);
        await page.waitForFunction((machine) => window.labvm.console && window.labvm.console.machine === machine
          && window.labvm.console.state === 'open', m, { timeout: 20000 });
        await typeIn(page, m, `echo "on-$(hostname)"`);
        await page.waitForFunction((machine) => {
          const rows = document.querySelector(`#terminal .term-pane[data-machine="${machine}"] .xterm-rows`);
          return rows && rows.textContent.includes(`on-${machine}`);
        }, m, { timeout: 15000 });
        const visible = await page.$$eval('#terminal .term-pane', (ps) => ps.filter((p) => !p.hidden)
          .map((p) => p.dataset.machine));
        assert(JSON.stringify(visible) === JSON.stringify([m]), 'only its terminal is shown', visible);
        const label = await page.getAttribute(`#terminal .term-pane[data-machine="${m}"] textarea`, 'aria-label');
        assert(label === `Terminal of machine ${m}`, 'the terminal is labelled with the machine', label);
      }
      await page.click('#tab-cp');
      const cp = await paneText(page, 'cp');
      assert(cp.includes('on-cp') && !cp.includes('on-worker1'), 'cp\'s terminal kept its own text', cp.slice(-200));
    });

    await step('switching between the tabs and back: every terminal is still live (all '
      + 'consoles open at once, one bridge console per machine)', async () => {
      for (const round of [1, 2]) {
        for (const m of ['worker2', 'cp', 'worker1']) {
          await page.click(`#tab-${m}`);
          // the typed line splits the tag, so only the shell's answer matches
          await typeIn(page, m, `echo "live${round}-""${m}-$(hostname)"`);
          await page.waitForFunction(([machine, want]) => {
            const rows = document.querySelector(`#terminal .term-pane[data-machine="${machine}"] .xterm-rows`);
            return rows && rows.textContent.includes(want);
          }, [m, `live${round}-${m}-${m}`], { timeout: 15000 }).catch(() => {});
          const text = await paneText(page, m);
          assert(text.includes(`live${round}-${m}-${m}`), `${m} answers after switching back (round ${round})`,
            text.slice(-300));
        }
      }
      const states = await page.evaluate(() => Object.fromEntries(Object.entries(window.labvm.consoles)
        .map(([k, c]) => [k, c.state])));
      assert(JSON.stringify(states) === JSON.stringify({ cp: 'open', worker1: 'open', worker2: 'open' }),
        'every machine\'s console is open', states);
      const sid = await page.evaluate(() => window.labvm.console.sid);
      const stats = await (await fetch(ENV.LABVM_CONSOLE_URL.replace(/^ws/, 'http').replace(/\/$/, '')
        + '/console-stats')).json();
      const mine = stats.session_list.filter((x) => x.id === sid && !x.closing)
        .map((x) => [x.browsers, x.upstream]);
      assert(JSON.stringify(mine) === JSON.stringify([[1, 'open'], [1, 'open'], [1, 'open']]),
        'the bridge: three consoles of this session, one browser and an open upstream each', stats.session_list);
    });

    await step('each machine\'s serial console gets its own terminal\'s size', async () => {
      await page.click('#tab-worker2');
      const want = await page.evaluate(() => `${window.labvm.console.term.rows} ${window.labvm.console.term.cols}`);
      let got = '';
      for (let i = 0; i < 20 && got !== want; i++) {
        await typeIn(page, 'worker2', 'echo "sz=$(stty size)="');
        await new Promise((r) => setTimeout(r, 500));
        const m = [...(await paneText(page, 'worker2')).matchAll(/sz=(\d+ \d+)=/g)];
        got = m.length ? m[m.length - 1][1] : '';
      }
      assert(got === want, 'stty size in worker2 is its terminal\'s', [got, want]);
    });

    await step('arrow keys move between the tabs', async () => {
      await page.focus('#tab-worker2');
      await page.keyboard.press('ArrowRight');
      const sel = await page.$eval('#machine-tabs [aria-selected="true"]', (b) => b.textContent);
      const foc = await page.evaluate(() => document.activeElement.id);
      assert(sel === 'cp' && foc === 'tab-cp', 'wraps to the first', [sel, foc]);
    });

    await step('axe: the lab view with its machine tabs (English, Japanese)', async () => {
      await page.evaluate(AXE);
      const out = [];
      for (const l of ['ja', 'en']) {
        await page.evaluate((x) => document.querySelector(`#lang-switch button[data-lang="${x}"]`).click(), l);
        const v = await page.evaluate(async () => (await window.axe.run(document, { resultTypes: ['violations'] }))
          .violations.map((x) => `${x.id} (${x.impact}): ${x.nodes.slice(0, 3).map((n) => n.target.join(' ')).join(' | ')}`));
        out.push(...v.map((x) => `[${l}] ${x}`));
      }
      assert(out.length === 0, 'axe violations', out);
      const label = await page.getAttribute('#terminal .term-pane[data-machine="worker1"] textarea', 'aria-label');
      assert(label === 'Terminal of machine worker1', 'labels follow the language', label);
    });

    await step('grading shows every machine\'s steps', async () => {
      await page.click('#grade');
      await page.waitForSelector('#grade-steps li', { timeout: 20000 });
      const steps = await page.$$eval('#grade-steps li .step-name', (xs) => xs.map((x) => x.textContent));
      assert(steps.some((s) => s.includes('worker1')) && steps.length === 5, 'five steps', steps);
      const machines = await page.$$eval('#grade-steps li', (xs) => xs.map((x) => x.dataset.machine));
      assert(JSON.stringify(machines) === JSON.stringify(['cp', 'cp', 'worker2', 'cp', 'worker1']),
        'each step names its machine', machines);
    });

    await step('a single-machine lesson shows no tabs', async () => {
      await endOpen();
      const s = await api('POST', '/api/sessions', { lesson: 'test-short' });
      assert(s.status === 201, 'started', s);
      await page.reload();
      await page.waitForSelector('#app[data-view="lab"]', { timeout: 60000 });
      await page.waitForFunction(() => window.labvm.console && window.labvm.console.state === 'open', null, { timeout: 20000 });
      assert(await page.$eval('#machine-tabs', (e) => e.hidden), 'no tabs');
    });
    await step('no script errors', async () => assert(problems.length === 0, 'problems', problems));
  } finally {
    await endOpen().catch(() => {});
    await browser.close();
  }
  done();
}

await main();
