/* labvm student page: talking to labvm's API. One call never throws
 * ({status, data, headers}; status 0 = no answer); every POST is JSON (the
 * server's CSRF guard); the server's clock is learnt from each answer's Date
 * header, so that times the server names (a queue estimate, Retry-After as
 * a date) are read on its clock, not on a wrong local one.
 */
'use strict';

(function () {
  const L = window.labvm;
  const { t, TEXTS } = L;

  let skew = 0;             // server clock - local clock (ms), from the Date header

  function noteServerDate(res) {
    const d = Date.parse(res.headers.get('Date') || '');
    if (isNaN(d)) return;
    const s = d + 500 - Date.now();          // the header has whole seconds
    if (Math.abs(s - skew) > 1500) skew = s;
  }

  function serverNow() { return Date.now() + skew; }

  /* One API call. Never throws: {status, data, headers}; status 0 = no answer. */
  async function api(method, path, body) {
    const opts = { method, headers: { Accept: 'application/json' }, credentials: 'same-origin', cache: 'no-store' };
    if (method === 'POST') {
      // application/json on every POST: the server's CSRF guard
      opts.headers['Content-Type'] = 'application/json';
      opts.body = JSON.stringify(body || {});
    }
    let res;
    try {
      res = await fetch(path, opts);
    } catch (e) {
      return { status: 0, data: { error: 'network' }, headers: new Headers() };
    }
    noteServerDate(res);
    let data = null;
    try { data = await res.json(); } catch (e) { data = null; }
    return { status: res.status, data: data || {}, headers: res.headers };
  }

  function errorText(r) {
    if (r.status === 0) return t('error.network');
    if (r.status === 401) return t('error.unauthenticated');   // the front end's, not JSON
    const code = r.data && r.data.error;
    if (code && TEXTS.en['error.' + code]) return t('error.' + code);
    if (r.data && r.data.message) return r.data.message;
    return t('error.generic', { code: code || ('HTTP ' + r.status) });
  }

  /* Retry-After (seconds or an HTTP date), else the body's retry_after_s, else 30. */
  function retryAfterSeconds(r) {
    const h = r.headers.get('Retry-After');
    if (h) {
      const n = Number(h);
      if (Number.isFinite(n) && n >= 0) return n;
      const d = Date.parse(h);
      if (!isNaN(d)) return Math.max(0, Math.round((d - serverNow()) / 1000));
    }
    return Number(r.data.retry_after_s) || 30;
  }

  const sessionPath = (id) => '/api/sessions/' + encodeURIComponent(id);

  Object.assign(L, { api, errorText, retryAfterSeconds, serverNow, skew: () => skew, sessionPath });
}());
