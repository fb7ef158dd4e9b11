// timeout: 600
/* t710: the page's answer to every error the API can return, in English and
 * in Japanese. The answers are injected under the page (Playwright routes
 * POST /api/sessions and GET /api/lessons) so each error is certain, however
 * hard it is to provoke for real; the page, its texts and the front end are
 * the real ones (lighttpd, a real login). Covered: every error code
 * labvm.fcgi returns (grep fcgi-app for the list in CODES below), the front
 * end's own 401, a network error, an answer that is not JSON (the generic
 * fallback), and a code the page does not know.
 */
import fs from 'node:fs';
import path from 'node:path';
import vm from 'node:vm';
import { fileURLToPath } from 'node:url';
import { ENV, PASSWORD, done, launch, report } from './lib.mjs';

const HERE = path.dirname(fileURLToPath(import.meta.url));
const SRC = process.env.LABVM_SRC || path.resolve(HERE, '..', '..');
const BASE = ENV.LABVM_LIGHTTPD_URL || ENV.LABVM_URL;
const LESSON = 'linux-basics';

// every code labvm.fcgi answers with (grep -r 'resp_error' fcgi-app; the guest
// agent's own codes never reach the page),
// session_exists aside (it shows the open session: t702)
const CODES = [
  [400, 'bad_request'], [401, 'unauthenticated'], [404, 'no_session'],
  [404, 'not_found'], [404, 'unknown_lesson'], [405, 'method_not_allowed'], [409, 'not_ready'],
  [409, 'never_fits'],
  [413, 'too_large'], [415, 'unsupported_media_type'],
  [500, 'internal_error'], [501, 'not_implemented'],
  [502, 'agent_unreachable'], [503, 'cluster_unavailable'], [503, 'db_unavailable'],
];

// the page's texts, read from web/i18n.js as the browser does
const sandbox = { window: {} };
vm.runInNewContext(fs.readFileSync(path.join(SRC, 'web', 'i18n.js'), 'utf8'), sandbox);
const TEXTS = sandbox.window.LABVM_TEXTS;

function text(lang, key, vars) {
  let s = (TEXTS[lang] && TEXTS[lang][key]) || TEXTS.en[key] || key;
  if (vars) s = s.replace(/\{(\w+)\}/g, (m, k) => (k in vars ? String(vars[k]) : m));
  return s;
}

/* What the page must say for one injected answer, in lang. */
function expected(lang, c) {
  if (c.network) return text(lang, 'error.network');
  if (c.status === 401) return text(lang, 'error.unauthenticated');
  if (c.capacity) return text(lang, 'capacity.body', { capacity: 8, in_use: 8 });
  const own = c.code && TEXTS.en['error.' + c.code];
  if (own) return text(lang, 'error.' + c.code);
  if (c.message) return c.message;           // a code the page has no text for: the server's words
  return text(lang, 'error.generic', { code: c.code || `HTTP ${c.status}` });
}

function cases() {
  const out = CODES.map(([status, code]) => ({
    name: `${status} ${code}`, status, code,
    body: JSON.stringify({ error: code, message: `server says ${code}` }), message: `server says ${code}`,
  }));
  out.push({ name: '503 capacity_full', status: 503, code: 'capacity_full', capacity: true,
    headers: { 'Retry-After': '30' },
    body: JSON.stringify({ error: 'capacity_full', message: 'full', capacity: 8, in_use: 8 }) });
  out.push({ name: 'the front end\'s own 401 (HTML)', status: 401, body: '<html>401</html>',
    contentType: 'text/html' });
  out.push({ name: 'a network error', network: true });
  out.push({ name: 'a 502 that is not JSON (generic fallback)', status: 502,
    body: '<html>Bad Gateway</html>', contentType: 'text/html' });
  out.push({ name: 'an unknown code without a message (generic fallback)', status: 500,
    code: 'brand_new_code', body: JSON.stringify({ error: 'brand_new_code' }) });
  return out;
}

async function answer(route, c) {
  if (c.network) return route.abort('failed');
  return route.fulfill({ status: c.status, contentType: c.contentType || 'application/json',
    headers: c.headers || {}, body: c.body });
}

async function run(browser, lang, locale, user) {
  const ctx = await browser.newContext({ httpCredentials: { username: user, password: PASSWORD },
    locale, viewport: { width: 1200, height: 800 } });
  try {
    const page = await ctx.newPage();
    let current = null;
    await page.route('**/api/sessions', (route) => {
      if (route.request().method() !== 'POST' || !current) return route.continue();
      return answer(route, current);
    });
    await page.goto(BASE + '/');
    const start = `#lesson-list li[data-lesson="${LESSON}"] button.start`;
    await page.waitForSelector(start, { timeout: 60000 });
    const got = await page.getAttribute('html', 'lang');
    report(got === lang, `${lang}: the page is in ${lang}`, got);
    for (const c of cases()) {
      const want = expected(lang, c);
      try {
        current = c;
        await page.evaluate(() => { document.querySelector('#lessons-notice .notice-body').textContent = ''; });
        await page.waitForSelector(`${start}:not([disabled])`, { timeout: 60000 });
        await page.click(start);
        await page.waitForFunction(
          () => !document.getElementById('lessons-notice').hidden &&
            document.querySelector('#lessons-notice .notice-body').textContent !== '',
          null, { timeout: 60000 });
        const shown = await page.textContent('#lessons-notice .notice-body');
        const kind = await page.getAttribute('#lessons-notice', 'data-kind');
        const ok = shown === want && kind === (c.capacity ? 'capacity' : 'error');
        report(ok, `${lang}: start answered ${c.name}: the page says so`,
          ok ? null : `shown ${JSON.stringify(shown)} (${kind}), want ${JSON.stringify(want)}`);
      } catch (e) {
        report(false, `${lang}: start answered ${c.name}: the page says so`, e.stack || String(e));
      }
    }
    // the lesson list itself failing to load
    current = null;
    await page.route('**/api/lessons', (route) => route.fulfill({ status: 503,
      contentType: 'application/json', body: JSON.stringify({ error: 'db_unavailable', message: 'x' }) }));
    await page.reload();
    const want = text(lang, 'error.db_unavailable');
    try {
      await page.waitForFunction((w) => document.body.innerText.includes(w), want, { timeout: 60000 });
      report(true, `${lang}: the lesson list failing (db_unavailable) is said`);
    } catch (e) {
      report(false, `${lang}: the lesson list failing (db_unavailable) is said`, `want ${want}`);
    }
  } finally {
    await ctx.close();
  }
}

const langs = Object.keys(TEXTS).sort().join(',');
report(langs === 'en,ja', 'the page has English and Japanese texts', langs);
for (const [, code] of CODES.filter(([, c]) => TEXTS.en['error.' + c])) {
  const ok = TEXTS.ja['error.' + code] && TEXTS.ja['error.' + code] !== TEXTS.en['error.' + code];
  report(ok, `error.${code} has a Japanese text of its own`);
}
let browser = null;
try {
  browser = await launch();
  await run(browser, 'en', 'en-US', 'student77');
  await run(browser, 'ja', 'ja-JP', 'student78');
} catch (e) {
  report(false, 'the browser runs', e && e.stack ? e.stack : String(e));
} finally {
  if (browser) await browser.close();
}
done();
