/* lib.mjs - what the e2e suites (tests/e2e/t*.mjs) share: Chromium, TAP
 * output, steps, labvm's API as a student, the simulator's admin API, and the
 * page's terminal. Not a suite itself (tests/run runs t*.mjs only). */
import { chromium } from 'playwright-core';
import fs from 'node:fs';
import https from 'node:https';

export const ENV = process.env;
export const PASSWORD = ENV.LABVM_PASSWORD || 'labvm';
export const CHROMIUM_ARGS = ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage', '--disable-quic',
  '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'];

/* Debian's /usr/bin/chromium, headless (PLATFORM.md's flags). */
export function launch() {
  return chromium.launch({ executablePath: '/usr/bin/chromium', headless: true, args: CHROMIUM_ARGS });
}

/* ------------------------------------------------------------------ TAP */
export const tap = { n: 0, failed: 0 };

export function report(pass, name, diag) {
  tap.n++;
  if (!pass) tap.failed++;
  console.log(`${pass ? 'ok' : 'not ok'} ${tap.n} - ${name}`);
  if (diag) for (const l of String(diag).trimEnd().split('\n')) console.log(`#   ${l}`);
}

export function diag(msg) {
  for (const l of String(msg).split('\n')) console.log(`# ${l}`);
}

/* The plan, and the exit status: 1 when a test failed. */
export function done() {
  console.log(`1..${tap.n}`);
  process.exit(tap.failed ? 1 : 0);
}

export function assert(cond, what, detail) {
  if (!cond) throw new Error(what + (detail !== undefined ? `: ${typeof detail === 'string' ? detail : JSON.stringify(detail)}` : ''));
}

/* One test: ok, or not ok with the error's stack; true when it passed. */
export async function step(name, fn) {
  try {
    await fn();
    report(true, name);
    return true;
  } catch (e) {
    report(false, name, e && e.stack ? e.stack : String(e));
    return false;
  }
}

/* Steps of one scenario run in order, named "<prefix>: <step>"; a step that
 * depends on an earlier failed one is reported as failed without running. */
export class Scenario {
  constructor(prefix) {
    this.prefix = prefix;
    this.broken = null;
  }

  async step(name, fn, { independent = false } = {}) {
    const full = `${this.prefix}: ${name}`;
    if (this.broken && !independent) {
      report(false, full, `not run: it needs "${this.broken}", which failed`);
      return;
    }
    const t0 = Date.now();
    try {
      await fn();
      const s = (Date.now() - t0) / 1000;
      report(true, full + (s >= 1 ? ` (${s.toFixed(1)}s)` : ''));
    } catch (e) {
      report(false, full, e && e.stack ? e.stack : String(e));
      if (!independent) this.broken = name;
    }
  }
}

export async function waitFor(fn, timeoutMs, what, intervalMs = 200) {
  const end = Date.now() + timeoutMs;
  let last;
  for (;;) {
    last = await fn();
    if (last) return last;
    if (Date.now() > end) throw new Error(`${what}: not reached within ${timeoutMs / 1000}s (last: ${JSON.stringify(last)})`);
    await new Promise((r) => setTimeout(r, intervalMs));
  }
}

/* ------------------------------------------------------------ labvm's API */
export const basic = (user) => 'Basic ' + Buffer.from(`${user}:${PASSWORD}`).toString('base64');

/* user null: no Authorization. data: the JSON answer, or null. */
export async function api(base, user, method, p, body, headers = {}) {
  const h = { Accept: 'application/json', ...headers };
  if (user) h.Authorization = basic(user);
  const opt = { method, headers: h };
  if (body !== undefined) {
    h['Content-Type'] = 'application/json';
    opt.body = JSON.stringify(body);
  }
  const r = await fetch(base + p, opt);
  const text = await r.text();
  let data = null;
  try { data = JSON.parse(text); } catch (e) { data = null; }
  return { status: r.status, data, text, headers: r.headers };
}

export async function endOpenSession(base, user) {
  const r = await api(base, user, 'GET', '/api/sessions/current');
  if (r.status === 200) await api(base, user, 'DELETE', `/api/sessions/${r.data.id}`);
}

/* The simulator's admin API (HTTPS, admin token): { status, data }. */
export function sim(method, p, body) {
  const url = new URL(ENV.LABVM_KUBE_URL);
  const token = fs.readFileSync(ENV.LABVM_KUBE_ADMIN_TOKEN_FILE, 'utf8').trim();
  const data = body === undefined ? null : Buffer.from(JSON.stringify(body));
  return new Promise((resolve, reject) => {
    const req = https.request({
      host: url.hostname, port: url.port, path: p, method, ca: fs.readFileSync(ENV.LABVM_KUBE_CA),
      headers: { Authorization: `Bearer ${token}`, Accept: 'application/json',
        ...(data ? { 'Content-Type': 'application/json', 'Content-Length': data.length } : {}) },
    }, (res) => {
      let buf = '';
      res.setEncoding('utf8');
      res.on('data', (c) => { buf += c; });
      res.on('end', () => {
        let j = null;
        try { j = JSON.parse(buf); } catch (e) { j = null; }
        resolve({ status: res.statusCode, data: j });
      });
    });
    req.on('error', reject);
    req.setTimeout(15000, () => req.destroy(new Error('simulator request timed out')));
    if (data) req.write(data);
    req.end();
  });
}

/* --------------------------------------------------------------- the page */
/* Script errors and console errors (not Chromium's own "Failed to load
 * resource" for the failed fetches a test provokes) go to problems. */
export function watchPage(page, problems) {
  page.on('pageerror', (e) => problems.push(`script error: ${e.message}`));
  page.on('console', (m) => {
    if (m.type() === 'error' && !/Failed to load resource/.test(m.text())) problems.push(`console error: ${m.text()}`);
  });
}

export const termText = (page) => page.evaluate(() => {
  const rows = document.querySelector('#terminal .xterm-rows');
  return rows ? rows.textContent : '';
});

export async function waitTerm(page, needle, timeout = 15000) {
  await page.waitForFunction((n) => {
    const rows = document.querySelector('#terminal .xterm-rows');
    return rows && rows.textContent.includes(n);
  }, needle, { timeout });
}

export async function typeInTerminal(page, text) {
  await page.click('#terminal');
  await page.keyboard.type(text);
  await page.keyboard.press('Enter');
}
