#!/usr/bin/env node
/* page-load.mjs: what the student page costs on a slow link.
 *
 *   node benchmarks/page-load.mjs [--url URL]... [--runs N] [--user U] [--json FILE]
 *
 * Loads the page in Debian's Chromium (playwright-core from tests/e2e) with
 * the network throttled through CDP Network.emulateNetworkConditions
 * (1.6 Mbit/s down, 750 kbit/s up, 150 ms latency: Lighthouse's "slow 4G")
 * and prints, per front end, the median of N runs of:
 *   - first load: bytes on the wire (headers included, every request up to
 *     the lesson list) and the time from navigation to the lesson list's
 *     first Start button, with an empty cache;
 *   - repeat load: the same with the cache of the first load (a student
 *     coming back);
 *   - terminal: bytes and time for what the terminal needs (xterm.js, its
 *     CSS, the fit addon, through vendor/manifest.json where there is one),
 *     fetched by the page after the first load, with an empty cache;
 *   - lab page: the same for the page's own scripts that load with a lab
 *     (session.js, console.js, lab.js, guidepane.js: window.labvm.labScripts),
 *     none of which the lesson list loads;
 *   - guide: the same for what the lesson guide adds when a lab starts
 *     (markdown-it, guide.js, guide.css and linux-basics' guide from
 *     GET /api/lessons/linux-basics/guide), none of which the lesson list
 *     loads.
 * URLs default to LABVM_LIGHTTPD_URL and LABVM_APACHE_URL (else LABVM_URL),
 * then to .check/env or .demo/env. A figure for the closing note of an
 * issue, not a test: nothing is asserted.
 */
import fs from 'node:fs';
import path from 'node:path';
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';

const HERE = path.dirname(fileURLToPath(import.meta.url));
const SRC = path.resolve(HERE, '..');
const require = createRequire(path.join(SRC, 'tests', 'e2e', 'package.json'));
const { chromium } = require('playwright-core');

const LINK = { offline: false, latency: 150, downloadThroughput: 1.6e6 / 8, uploadThroughput: 750e3 / 8 };
const ARGS = ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage', '--disable-quic',
  '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'];

function envFile() {
  for (const f of [process.env.LABVM_ENV_FILE, path.join(SRC, '.check', 'env'), path.join(SRC, '.demo', 'env')]) {
    if (!f || !fs.existsSync(f)) continue;
    const out = {};
    for (const line of fs.readFileSync(f, 'utf8').split('\n')) {
      const m = /^(\w+)='?(.*?)'?$/.exec(line.trim());
      if (m) out[m[1]] = m[2];
    }
    return out;
  }
  return {};
}

function parseArgs() {
  const a = { urls: [], runs: 3, user: 'student199', json: null };
  const v = process.argv.slice(2);
  for (let i = 0; i < v.length; i++) {
    if (v[i] === '--url') a.urls.push(v[++i]);
    else if (v[i] === '--runs') a.runs = Number(v[++i]);
    else if (v[i] === '--user') a.user = v[++i];
    else if (v[i] === '--json') a.json = v[++i];
    else { console.error(`usage: ${path.basename(process.argv[1])} [--url URL]... [--runs N] [--user U] [--json FILE]`); process.exit(2); }
  }
  if (!a.urls.length) {
    const e = { ...envFile(), ...process.env };
    for (const k of ['LABVM_LIGHTTPD_URL', 'LABVM_APACHE_URL']) if (e[k]) a.urls.push(e[k]);
    if (!a.urls.length && e.LABVM_URL) a.urls.push(e.LABVM_URL);
  }
  if (!a.urls.length) { console.error('no URL: --url, LABVM_URL or a stack env file'); process.exit(2); }
  a.password = process.env.LABVM_PASSWORD || 'labvm';
  return a;
}

/* One load in a page whose CDP session throttles it; returns bytes, time, requests. */
/* Fetch urls from the page (empty cache): {ms, bytes on the wire}. */
async function fetchAll(page, reqs, urls) {
  const n0 = reqs.size;
  const ms = await page.evaluate(async (list) => {
    const t0 = performance.now();
    await Promise.all(list.map((u) => fetch(u, { cache: 'no-store' }).then((r) => r.arrayBuffer())));
    return performance.now() - t0;
  }, urls);
  await new Promise((r) => setTimeout(r, 300));
  const more = [...reqs.values()].slice(n0);
  return { ms, bytes: more.reduce((n, r) => n + r.bytes, 0) };
}

async function load(ctx, url, terminal) {
  const page = await ctx.newPage();
  const cdp = await ctx.newCDPSession(page);
  await cdp.send('Network.enable');
  await cdp.send('Network.emulateNetworkConditions', LINK);
  const reqs = new Map();
  cdp.on('Network.requestWillBeSent', (e) => reqs.set(e.requestId, { url: e.request.url, bytes: 0, status: 0, cached: false }));
  cdp.on('Network.responseReceived', (e) => {
    const r = reqs.get(e.requestId);
    if (r) { r.status = e.response.status; r.enc = e.response.headers['content-encoding'] || e.response.headers['Content-Encoding'] || ''; }
  });
  cdp.on('Network.requestServedFromCache', (e) => { const r = reqs.get(e.requestId); if (r) r.cached = true; });
  cdp.on('Network.loadingFinished', (e) => { const r = reqs.get(e.requestId); if (r) r.bytes = e.encodedDataLength; });
  await page.goto(url + '/', { waitUntil: 'commit' });
  await page.waitForSelector('#lesson-list li[data-lesson] button.start', { timeout: 120000 });
  const ms = await page.evaluate(() => performance.now());
  await new Promise((r) => setTimeout(r, 300));   // the last loadingFinished events
  const list = [...reqs.values()];
  const bytes = list.reduce((n, r) => n + r.bytes, 0);
  let term = null;
  let guide = null;
  let labjs = null;
  if (terminal) {
    const own = await page.evaluate(() => (window.labvm && window.labvm.labScripts) || []);
    if (own.length) labjs = await fetchAll(page, reqs, own);
    let man = null;
    try {
      man = await page.evaluate(async () => {
        const m = await fetch('/vendor/manifest.json', { cache: 'no-store' });
        return m.ok ? m.json() : null;
      });
    } catch (e) { man = null; }
    const isGuide = (k) => k.startsWith('markdown-it');
    const xterm = man ? Object.entries(man).filter(([k]) => !isGuide(k)).map(([, u]) => u) : ['/vendor/xterm.js', '/vendor/xterm.css'];
    term = await fetchAll(page, reqs, xterm);
    const md = man ? Object.entries(man).filter(([k]) => isGuide(k)).map(([, u]) => u) : [];
    if (md.length) guide = await fetchAll(page, reqs, [...md, '/guide.js', '/guide.css', '/api/lessons/linux-basics/guide?lang=en']);
  }
  await page.close();
  return { ms, bytes, reqs: list, term, guide, labjs };
}

const median = (v) => { const s = [...v].sort((a, b) => a - b); return s[Math.floor((s.length - 1) / 2)]; };
const kib = (b) => (b / 1024).toFixed(1);

async function main() {
  const a = parseArgs();
  const browser = await chromium.launch({ executablePath: '/usr/bin/chromium', headless: true, args: ARGS });
  const results = [];
  try {
    for (const url of a.urls) {
      const cold = [];
      const warm = [];
      let detail = null;
      for (let i = 0; i < a.runs; i++) {
        // the login as a header, as a browser sends it once logged in (and
        // httpCredentials would turn on request interception, which turns
        // the cache off)
        const auth = 'Basic ' + Buffer.from(`${a.user}:${a.password}`).toString('base64');
        const ctx = await browser.newContext({ extraHTTPHeaders: { Authorization: auth },
          viewport: { width: 1400, height: 900 }, locale: 'en-US' });
        const c = await load(ctx, url, true);    // a new context: an empty cache
        const w = await load(ctx, url, false);
        await ctx.close();
        cold.push(c);
        warm.push(w);
        if (!detail) detail = c.reqs;
      }
      const r = {
        url, runs: a.runs, link: LINK,
        first: { bytes: median(cold.map((x) => x.bytes)), ms: median(cold.map((x) => x.ms)) },
        repeat: { bytes: median(warm.map((x) => x.bytes)), ms: median(warm.map((x) => x.ms)) },
        terminal: { bytes: median(cold.map((x) => x.term.bytes)), ms: median(cold.map((x) => x.term.ms)) },
        labPage: cold[0].labjs ? { bytes: median(cold.map((x) => x.labjs.bytes)), ms: median(cold.map((x) => x.labjs.ms)) } : null,
        guide: cold[0].guide ? { bytes: median(cold.map((x) => x.guide.bytes)), ms: median(cold.map((x) => x.guide.ms)) } : null,
        requests: detail.map((q) => ({ path: new URL(q.url).pathname, status: q.status, bytes: q.bytes, encoding: q.enc || '' })),
      };
      results.push(r);
      console.log(`${url}  (1.6 Mbit/s down, 750 kbit/s up, 150 ms; median of ${a.runs})`);
      console.log(`  first load:  ${kib(r.first.bytes).padStart(7)} KiB on the wire, lesson list after ${(r.first.ms / 1000).toFixed(2)} s`);
      console.log(`  repeat load: ${kib(r.repeat.bytes).padStart(7)} KiB on the wire, lesson list after ${(r.repeat.ms / 1000).toFixed(2)} s`);
      console.log(`  terminal:    ${kib(r.terminal.bytes).padStart(7)} KiB on the wire, fetched in ${(r.terminal.ms / 1000).toFixed(2)} s (xterm.js and co., empty cache)`);
      if (r.labPage) console.log(`  lab page:    ${kib(r.labPage.bytes).padStart(7)} KiB on the wire, fetched in ${(r.labPage.ms / 1000).toFixed(2)} s (session.js, console.js, lab.js, guidepane.js; with a lab, not the list)`);
      if (r.guide) console.log(`  guide:       ${kib(r.guide.bytes).padStart(7)} KiB on the wire, fetched in ${(r.guide.ms / 1000).toFixed(2)} s (markdown-it, guide.js/.css, linux-basics' guide; with a lab, not the list)`);
      for (const q of r.requests) {
        console.log(`    ${String(q.status).padStart(3)} ${kib(q.bytes).padStart(7)} KiB ${(q.encoding || '-').padEnd(5)} ${q.path}`);
      }
    }
  } finally {
    await browser.close();
  }
  if (a.json) fs.writeFileSync(a.json, JSON.stringify(results, null, 1) + '\n');
}

await main();
