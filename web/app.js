/* labvm student page: lessons, start, progress, terminal, grade, end.
 *
 * No framework and no build step: this file, i18n.js and the vendored
 * xterm.js with its fit addon (web/vendor, copied from npm by make, loaded
 * only when a lab starts: web/vendor/manifest.json names the versioned URLs).
 * Everything the server says is shown with textContent, never as HTML.
 *
 * For every student: the page never moves focus into the terminal by itself
 * (only right after the student pressed Start and stayed put); Esc then Tab
 * leaves the terminal (xterm.js takes Tab for the shell); xterm.js's
 * screen-reader mode is on; stage, connection and grade changes are said in
 * live regions; focus moves to the new view's heading when a view replaces
 * the one it was in. The terminal fits its box (phones too) and tells the
 * bridge its size (a text message {"type":"resize","cols","rows"}).
 *
 * Views: loading -> lessons -> starting -> lab -> ended, or failed.
 *   - The open session is the page's truth: on load, on a 409 session_exists
 *     (double click, second tab) and when the tab becomes visible again the
 *     page shows the session the server names.
 *   - starting: the session's event stream (EventSource on
 *     /api/sessions/{id}/events: one event per stage change, the session
 *     JSON in each, the final one at ready, failed or ended); while the
 *     stream is not open (blocked, refused, reconnecting) GET
 *     /api/sessions/{id} every second, as before, until ready or failed.
 *   - lab: an xterm.js terminal on the console bridge. Every (re)connect asks
 *     for a new single-use ticket. When the connection drops it reconnects by
 *     itself with exponential backoff (about 1, 2, 4, 8, 16, then 30 s, with
 *     jitter; back to 1 s after a connection stayed up 10 s); close code 4410
 *     (session ended) stops that and shows the session's end.
 */
'use strict';

(function () {
  const $ = (id) => document.getElementById(id);
  const STAGES = ['submitted', 'scheduling', 'booting', 'setting_up', 'ready'];
  const POLL_STARTING_MS = 1000;
  const POLL_READY_MS = 20000;
  const CONSOLE_PROTO = 'labvm-console.v1';
  const OPEN_TIMEOUT_MS = 20000;   // ticket -> status "open"
  const STABLE_MS = 10000;         // a connection up this long resets the backoff
  const BACKOFF_MAX_MS = 30000;
  const ESC_HOLD_MS = 1000;        // Esc, then Tab within this: leave the terminal
  const MAX_COLS = 500;
  const TTY_SIZE_DELAY_MS = 300;   // a VM's size goes to the API once resizing settles

  /* ------------------------------------------------------------ texts */
  const TEXTS = window.LABVM_TEXTS;

  function pickLang() {
    let saved = null;
    try { saved = localStorage.getItem('labvm.lang'); } catch (e) { /* private mode */ }
    if (saved && TEXTS[saved]) return saved;
    const prefs = (navigator.languages && navigator.languages.length)
      ? navigator.languages : [navigator.language || 'en'];
    for (const p of prefs) {
      const base = String(p).toLowerCase().split('-')[0];
      if (TEXTS[base]) return base;
    }
    return 'en';
  }

  let lang = pickLang();

  function t(key, vars) {
    let s = (TEXTS[lang] && TEXTS[lang][key]) || TEXTS.en[key] || key;
    if (vars) s = s.replace(/\{(\w+)\}/g, (m, k) => (k in vars ? String(vars[k]) : m));
    return s;
  }

  function fmtDuration(sec) {
    sec = Math.max(0, Math.floor(sec));
    const m = Math.floor(sec / 60), s = sec % 60;
    return m ? t('time.ms', { m, s }) : t('time.s', { s });
  }

  function fmtClock(sec) {            // 1:02:03 or 12:34
    sec = Math.max(0, Math.floor(sec));
    const h = Math.floor(sec / 3600), m = Math.floor((sec % 3600) / 60), s = sec % 60;
    const mm = h ? String(m).padStart(2, '0') : String(m);
    return (h ? h + ':' : '') + mm + ':' + String(s).padStart(2, '0');
  }

  function fmtTime(ms) {
    return new Date(ms).toLocaleTimeString(lang === 'ja' ? 'ja-JP' : 'en-GB');
  }

  function applyTexts() {
    document.documentElement.lang = lang;
    document.querySelectorAll('[data-i18n]').forEach((el) => { el.textContent = t(el.dataset.i18n); });
    document.querySelectorAll('[data-i18n-label]').forEach((el) => {
      el.setAttribute('aria-label', t(el.dataset.i18nLabel));
    });
    document.querySelectorAll('#lang-switch button').forEach((b) => {
      b.setAttribute('aria-pressed', String(b.dataset.lang === lang));
    });
    for (const c of lab ? Object.values(lab.consoles) : []) {
      const ta = c.term.textarea;
      if (ta) ta.setAttribute('aria-label', c.machine ? t('lab.termLabelMachine', { name: c.machine })
        : t('lab.termLabel'));
    }
    updateTitle();
  }

  /* The tab's title follows the view: a student with several tabs knows which is which. */
  function updateTitle() {
    const s = S.session;
    let v;
    if (S.view === 'starting' && s) v = t('starting.heading', { title: lessonTitle(s.lesson) });
    else if (S.view === 'queued' && s) v = t('queue.heading', { title: lessonTitle(s.lesson) });
    else if (S.view === 'lab' && s) v = lessonTitle(s.lesson);
    else if (S.view === 'failed') v = t('failed.heading');
    else if (S.view === 'ended') v = t('ended.heading');
    else if (S.view === 'lessons') v = t('lessons.heading');
    else v = t('app.title');
    const title = t('title.page', { view: v });
    if (document.title !== title) document.title = title;
  }

  /* Say something in a live region (cleared first, so the same words twice are said twice). */
  function announce(id, text) {
    const r = $(id);
    if (r.textContent === text) r.textContent = '';
    setTimeout(() => { r.textContent = text; }, 50);
  }

  /* -------------------------------------------------------------- API */
  const S = {
    view: 'loading',
    lessons: [],
    lessonsError: null,
    notice: null,        // {kind: 'capacity'|'error', ...} on the lessons view
    session: null,
    note: null,          // 'exists': shown above the open session
    remain: null,        // {s: remaining_s, at: Date.now()}
    grade: null,
    gradeBusy: false,
    labError: null,
    skew: 0,             // server clock - local clock (ms), from the Date header
    offline: false,
    termOnReady: false,  // the student pressed Start: the terminal takes focus at ready if they stayed
  };

  function noteServerDate(res) {
    const d = Date.parse(res.headers.get('Date') || '');
    if (isNaN(d)) return;
    const skew = d + 500 - Date.now();          // the header has whole seconds
    if (Math.abs(skew - S.skew) > 1500) S.skew = skew;
  }

  function serverNow() { return Date.now() + S.skew; }

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

  const sessionPath = (id) => '/api/sessions/' + encodeURIComponent(id);

  /* ------------------------------------------------------------ views */
  const HEADINGS = { lessons: 'lessons-title', queued: 'queued-title', starting: 'starting-title', lab: 'lab-title',
    failed: 'failed-title', ended: 'ended-title' };

  /* Show a view. When the focus was in the view that goes away (a button the
   * student pressed), it moves to the new view's heading instead of dropping
   * to the page's body; `focus` forces that (a student's own action). */
  function show(view, focus) {
    const prev = S.view;
    const active = document.activeElement;
    const lost = active && active !== document.body && active.closest('main > .view') &&
      active.closest('main > .view').id !== 'view-' + view;
    S.view = view;
    $('app').dataset.view = view;
    document.querySelectorAll('main > .view').forEach((el) => { el.hidden = el.id !== 'view-' + view; });
    if ((focus || lost) && prev !== undefined && HEADINGS[view]) {
      $(HEADINGS[view]).focus({ preventScroll: false });
    }
    updateTitle();
  }

  function el(tag, attrs, ...kids) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === null || v === undefined || v === false) continue;
      if (k === 'class') e.className = v;
      else if (k === 'text') e.textContent = v;
      else if (k.startsWith('data-')) e.setAttribute(k, v);
      else e[k] = v;
    }
    for (const c of kids) if (c !== null && c !== undefined) e.append(c);
    return e;
  }

  // a lesson's own text in the page's language, when the lesson has it
  function lessonText(l, field) {
    const tr = l.i18n && l.i18n[lang];
    return (tr && tr[field]) || l[field];
  }

  function lessonTitle(id) {
    const l = S.lessons.find((x) => x.id === id);
    return l ? lessonText(l, 'title') : id;
  }

  /* ---------------------------------------------------------- lessons */
  async function loadLessons() {
    const r = await api('GET', '/api/lessons');
    if (r.status === 200 && Array.isArray(r.data.lessons)) {
      S.lessons = r.data.lessons;
      S.lessonsError = null;
    } else {
      S.lessonsError = errorText(r);
    }
  }

  function showLessons(focus) {
    leaveLab();
    closeStream();
    stopPoll();
    S.session = null;
    S.note = null;
    show('lessons', focus);
    renderLessons();
    if (S.notice && (focus || document.activeElement === document.body)) $('lessons-notice').focus();
  }

  let startBusy = null;   // the lesson id being started: one start at a time

  function renderLessons() {
    const ul = $('lesson-list');
    ul.replaceChildren();
    if (S.lessonsError) {
      const b = el('button', { type: 'button', text: t('lessons.reload') });
      b.addEventListener('click', async () => { await loadLessons(); renderLessons(); });
      ul.append(el('li', { class: 'lesson error' },
        el('p', { text: t('lessons.loadError', { msg: S.lessonsError }) }), b));
    } else if (!S.lessons.length) {
      ul.append(el('li', { class: 'lesson empty', text: t('lessons.empty') }));
    }
    for (const l of S.lessons) {
      const meta = [t('lessons.minutes', { n: l.minutes }),
        t('lessons.runtime.' + l.runtime) || l.runtime];
      if (l.grader_steps) meta.push(t('lessons.steps', { n: l.grader_steps }));
      const busy = startBusy === l.id;
      const b = el('button', {
        type: 'button', class: 'primary start', 'data-lesson': l.id,
        text: busy ? t('lessons.starting') : t('lessons.start'), disabled: startBusy !== null,
      });
      b.addEventListener('click', () => start(l.id));
      ul.append(el('li', { class: 'lesson', 'data-lesson': l.id },
        el('h3', { text: lessonText(l, 'title') }),
        l.description ? el('p', { class: 'desc', text: lessonText(l, 'description') }) : null,
        el('p', { class: 'meta muted', text: meta.join(' · ') }),
        el('div', { class: 'actions' }, b)));
    }
    renderNotice();
  }

  function renderNotice() {
    const box = $('lessons-notice');
    const n = S.notice;
    box.hidden = !n;
    if (!n) return;
    box.dataset.kind = n.kind;
    box.className = 'notice ' + (n.kind === 'capacity' ? 'warn' : 'error');
    const joinq = $('notice-queue');
    joinq.hidden = !(n.kind === 'capacity' && n.canQueue && n.lesson);
    joinq.disabled = startBusy !== null;
    const retry = $('notice-retry');
    retry.hidden = !n.lesson;
    retry.textContent = n.kind === 'capacity' ? t('capacity.retry') : t('failed.again');
    retry.disabled = startBusy !== null;
    if (n.kind === 'capacity') {
      box.querySelector('.notice-title').textContent = t('capacity.title');
      box.querySelector('.notice-body').textContent = t('capacity.body', { capacity: n.capacity, in_use: n.in_use }) +
        (n.canQueue ? ' ' + t('queue.offer') : '');
      renderCapacityWhen();
    } else {
      box.querySelector('.notice-title').textContent = '';
      box.querySelector('.notice-body').textContent = n.text;
      box.querySelector('.notice-when').textContent = '';
    }
  }

  function renderCapacityWhen() {
    const n = S.notice;
    if (!n || n.kind !== 'capacity') return;
    const left = (n.retryAt - Date.now()) / 1000;
    const w = $('lessons-notice').querySelector('.notice-when');
    w.textContent = left > 0.5
      ? t('capacity.when', { wait: fmtDuration(Math.ceil(left)), at: fmtTime(n.retryAt) })
      : t('capacity.now');
    w.dataset.retryAfter = String(n.retryAfter);
  }

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

  async function start(lessonId, queue) {
    if (startBusy !== null) return;   // a double click starts once
    startBusy = lessonId;
    S.notice = null;
    if (S.view === 'lessons') renderLessons();
    $('failed-again').disabled = true;
    loadTerminal().catch(() => {});   // meanwhile: the terminal is needed soon
    const r = await api('POST', '/api/sessions', queue ? { lesson: lessonId, queue: true } : { lesson: lessonId });
    startBusy = null;
    $('failed-again').disabled = false;
    if ((r.status === 201 || r.status === 202) && r.data.id) {
      S.termOnReady = true;
      // a prepared machine from the warm pool: ready at the press
      if (r.data.pool && r.data.state === 'ready') S.note = 'pool';
      showSession(r.data, true);
      return;
    }
    if (r.status === 409 && r.data.error === 'session_exists' && r.data.session) {
      // another click or tab was first: that session is the answer
      S.note = 'exists';
      showSession(r.data.session, true);
      return;
    }
    if (r.status === 503 && r.data.error === 'capacity_full') {
      const ra = retryAfterSeconds(r);
      S.notice = { kind: 'capacity', lesson: lessonId, capacity: r.data.capacity, in_use: r.data.in_use,
        retryAfter: ra, retryAt: Date.now() + ra * 1000, canQueue: r.data.can_queue === true };
    } else {
      S.notice = { kind: 'error', lesson: lessonId, text: errorText(r), code: r.data.error || r.status };
    }
    showLessons(true);
  }

  /* --------------------------------------------------------- sessions */
  let pollTimer = null;
  let pollSeq = 0;

  function stopPoll() {
    clearTimeout(pollTimer);
    pollTimer = null;
    pollSeq++;
  }

  function schedulePoll(ms) {
    clearTimeout(pollTimer);
    const seq = ++pollSeq;
    pollTimer = setTimeout(() => { if (seq === pollSeq) refreshSession(); }, ms);
  }

  /* The event stream of a starting session. EventSource resumes by itself
   * (Last-Event-ID); while it is not open the page polls. A stream the
   * server refused (404, 503 streams_full, 204) is not tried again for that
   * session: polling it is. */
  let es = null;
  let esId = null;
  let esRefused = null;

  function closeStream() {
    if (es) es.close();
    es = null;
    esId = null;
  }

  function streamOpen(id) {
    return es !== null && esId === id && es.readyState === 1;   // EventSource.OPEN
  }

  function followStream(id) {
    if (typeof EventSource !== 'function' || esRefused === id) return;
    if (es && esId === id) return;
    closeStream();
    const src = new EventSource(sessionPath(id) + '/events');
    es = src;
    esId = id;
    src.onopen = () => { if (es === src) stopPoll(); };
    src.onmessage = (e) => {
      if (es !== src || !S.session || S.session.id !== id) return;
      let s;
      try { s = JSON.parse(e.data); } catch (err) { return; }
      if (!s || s.id !== id) return;
      S.offline = false;
      showSession(s);
    };
    src.onerror = () => {
      if (es !== src) return;
      if (src.readyState === 2) {         // CLOSED: refused; poll this session
        esRefused = id;
        closeStream();
      }
      // meanwhile (or from now on) the plain GET keeps the page current
      if (S.session && S.session.id === id && S.session.state === 'starting' && !pollTimer) {
        schedulePoll(POLL_STARTING_MS);
      }
    };
  }

  let refreshing = null;

  /* GET the session now (one request at a time) and show what it says. */
  function refreshSession() {
    if (!S.session) return Promise.resolve();
    if (refreshing) return refreshing;
    const id = S.session.id;
    refreshing = (async () => {
      const r = await api('GET', sessionPath(id));
      refreshing = null;
      if (!S.session || S.session.id !== id) return;
      if (r.status === 200) {
        S.offline = false;
        showSession(r.data);
      } else if (r.status === 404) {
        showLessons();             // gone (or not ours any more)
      } else {
        S.offline = true;          // keep polling; say so while starting
        renderSessionView();
        schedulePoll(S.session.state === 'starting' || S.session.state === 'queued' ? 2000 : POLL_READY_MS / 4);
      }
    })();
    return refreshing;
  }

  function showSession(s, focus) {
    const prev = S.session;
    if (!prev || prev.id !== s.id) { S.grade = null; S.labError = null; }
    S.session = s;
    if (typeof s.remaining_s === 'number') S.remain = { s: s.remaining_s, at: Date.now() };
    else S.remain = null;
    if (s.last_grade && (!S.grade || (s.last_grade.graded_at && s.last_grade.graded_at !== S.grade.graded_at))) {
      S.grade = s.last_grade;
    }
    stopPoll();
    switch (s.state) {
      case 'queued': {
        // waiting in line: poll (which keeps the place and moves the line);
        // the answer turns into the session when it is this student's turn
        leaveLab();
        show('queued', focus);
        loadTerminal().catch(() => {});
        schedulePoll(((s.queue && s.queue.poll_s) || 2) * 1000);
        break;
      }
      case 'lapsed':
      case 'left':
        S.session = null;
        S.notice = s.state === 'lapsed' ? { kind: 'error', lesson: s.lesson, text: t('queue.lapsed'), code: 'lapsed' } : null;
        showLessons(true);
        return;
      case 'starting': {
        leaveLab();
        if (S.view !== 'starting') S.stageSaid = null;
        show('starting', focus);
        loadTerminal().catch(() => {});
        followStream(s.id);
        if (!streamOpen(s.id)) schedulePoll(POLL_STARTING_MS);
        break;
      }
      case 'ready': {
        closeStream();
        // the terminal takes the focus only when the student pressed Start
        // and has not moved on since (focus still on the starting heading)
        const a = document.activeElement;
        const stayed = S.view === 'starting' && (a === $('starting-title') || a === document.body);
        const wantTerm = S.termOnReady && (stayed || (focus && S.view !== 'lab'));
        S.termOnReady = false;
        show('lab', focus && !wantTerm);
        enterLab(s, wantTerm);
        schedulePoll(POLL_READY_MS);
        break;
      }
      case 'failed':
        closeStream();
        leaveLab();
        S.termOnReady = false;
        show('failed', focus);
        break;
      default:
        closeStream();
        leaveLab();
        S.termOnReady = false;
        show('ended', focus);
    }
    renderSessionView();
  }

  function renderSessionView() {
    const s = S.session;
    if (!s) return;
    if (S.view === 'starting') renderStarting(s);
    else if (S.view === 'queued') renderQueued(s);
    else if (S.view === 'lab') renderLab(s);
    else if (S.view === 'failed') renderFailed(s);
    else if (S.view === 'ended') renderEnded(s);
  }

  function renderNote(id) {
    const p = $(id);
    const note = S.note === 'exists' || S.note === 'pool' ? S.note : null;
    p.hidden = !note;
    p.textContent = note ? t(note + '.note') : '';
  }

  // 1st, 2nd, 3rd, 4th ... 11th, 12th, 13th, 21st; 日本語: 3番目
  function ordinal(n) {
    if (lang === 'ja') return String(n);
    const m100 = n % 100, m10 = n % 10;
    const suf = m100 >= 11 && m100 <= 13 ? 'th' : m10 === 1 ? 'st' : m10 === 2 ? 'nd' : m10 === 3 ? 'rd' : 'th';
    return n + suf;
  }

  function renderQueued(s) {
    const q = s.queue || {};
    $('queued-title').textContent = t('queue.heading', { title: lessonTitle(s.lesson) });
    const pos = $('queue-position');
    const said = q.position === 1 ? t('queue.next') + ' (' + t('queue.position', { ord: ordinal(1) }) + ')'
      : t('queue.position', { ord: ordinal(q.position) });
    if (pos.textContent !== said) pos.textContent = said;
    pos.dataset.position = String(q.position);
    $('queued-offline').hidden = !S.offline;
    const now = serverNow();
    const est = Date.parse(q.estimate || ''), bound = Date.parse(q.no_later_than || '');
    const e = $('queue-estimate'), b = $('queue-bound');
    if (isNaN(est)) e.textContent = t('queue.unknown');
    else if (est - now < 5000) e.textContent = t('queue.estimateSoon');
    else e.textContent = t('queue.estimate', { at: fmtTime(est - S.skew), wait: fmtDuration((est - now) / 1000) });
    e.dataset.estimate = q.estimate || '';
    b.hidden = isNaN(bound);
    b.textContent = isNaN(bound) ? '' : t('queue.bound', { at: fmtTime(bound - S.skew), wait: fmtDuration((bound - now) / 1000) });
    b.dataset.bound = q.no_later_than || '';
  }

  function renderStarting(s) {
    renderNote('starting-note');
    $('starting-title').textContent = t('starting.heading', { title: lessonTitle(s.lesson) });
    const idx = Math.max(0, STAGES.indexOf(s.stage));
    document.querySelectorAll('#stages li').forEach((li, i) => {
      const st = i < idx ? 'done' : i === idx ? 'active' : 'pending';
      li.dataset.state = st;
      if (st === 'active') li.setAttribute('aria-current', 'step');
      else li.removeAttribute('aria-current');
    });
    $('stages').dataset.stage = s.stage;
    if (S.stageSaid !== s.stage) {
      S.stageSaid = s.stage;
      announce('stage-live', t('stage.live', { stage: t('stage.' + (STAGES.includes(s.stage) ? s.stage : 'submitted')) }));
    }
    $('progress-bar').style.width = Math.round(((idx + 0.5) / STAGES.length) * 100) + '%';
    const d = s.disk || {};
    $('disk-info').textContent = d.fallback_reason
      ? t('starting.disk.fallback', { reason: d.fallback_reason })
      : d.source ? t('starting.disk.' + d.source) : '';
    $('starting-offline').hidden = !S.offline;
    renderElapsed();
    updateTitle();
  }

  function renderElapsed() {
    const s = S.session;
    if (!s || S.view !== 'starting') return;
    const t0 = Date.parse(s.created_at);
    $('elapsed').textContent = isNaN(t0) ? '–' : fmtDuration((serverNow() - t0) / 1000);
  }

  function renderFailed(s) {
    $('failed-title').textContent = s.ready_at ? t('failed.lost') : t('failed.heading');
    // the error starts with the stage it failed in ("setting_up: ...")
    const m = /^([a-z_]+): /.exec(s.error || '');
    const stage = m && STAGES.includes(m[1]) ? m[1] : s.stage;
    $('failed-stage').textContent = t('failed.stage', { stage: t('stage.' + stage) });
    $('failed-error').textContent = (m && STAGES.includes(m[1]) ? s.error.slice(m[0].length) : s.error) || '';
    $('failed-again').dataset.lesson = s.lesson;
  }

  function renderEnded(s) {
    const r = s.end_reason;
    $('ended-text').textContent = r === 'user' ? t('ended.user')
      : r === 'expired' ? t('ended.expired') : t('ended.other', { reason: r || s.state });
  }

  async function endSession(id) {
    const r = await api('DELETE', sessionPath(id));
    if (r.status === 200) {
      showSession(r.data);
    } else if (r.status === 404) {
      showLessons();
    } else {
      S.labError = errorText(r);
      renderSessionView();
    }
    return r.status;
  }

  /* --------------------------------------------------------------- lab */
  // {sid, console, consoles, machines}: console is the shown machine's (null
  // while xterm.js loads); a session of several machines has one Console
  // (its own bridge session) per machine, opened when its tab is first shown
  let lab = null;

  /* xterm.js, its CSS and the fit addon, loaded once, when a lab needs them.
   * web/vendor/manifest.json (written by make) names versioned URLs, which
   * the front ends let browsers keep for a year. */
  let termLoad = null;

  function loadAsset(url, css) {
    return new Promise((resolve, reject) => {
      const e = document.createElement(css ? 'link' : 'script');
      if (css) { e.rel = 'stylesheet'; e.href = url; } else { e.src = url; e.async = false; }
      e.onload = () => resolve();
      e.onerror = () => reject(new Error(url));
      document.head.append(e);
    });
  }

  function loadTerminal() {
    if (typeof window.Terminal === 'function' && window.FitAddon) return Promise.resolve();
    if (termLoad) return termLoad;
    termLoad = (async () => {
      let files = { 'xterm.js': '/vendor/xterm.js', 'xterm.css': '/vendor/xterm.css', 'addon-fit.js': '/vendor/addon-fit.js' };
      try {
        const r = await fetch('/vendor/manifest.json', { credentials: 'same-origin', cache: 'no-cache' });
        if (r.ok) files = Object.assign(files, await r.json());
      } catch (e) { /* the unversioned names */ }
      await Promise.all([loadAsset(files['xterm.css'], true), loadAsset(files['xterm.js']),
        loadAsset(files['addon-fit.js'])]);
      if (typeof window.Terminal !== 'function' || !window.FitAddon) throw new Error('/vendor/xterm.js');
    })();
    termLoad.catch(() => { termLoad = null; });   // a later lab tries again
    return termLoad;
  }

  function enterLab(s, focusTerm) {
    if (lab && lab.sid === s.id) return;
    leaveLab();
    $('end-confirm').hidden = true;
    const machines = (s.vms || []).map((v) => v.machine).filter(Boolean);
    const me = { sid: s.id, console: null, consoles: {}, machines, runtime: s.runtime };
    lab = me;
    $('conn').dataset.conn = 'connecting';
    $('conn-text').textContent = t('lab.loadingTerminal');
    renderTabs();
    loadTerminal().then(() => {
      if (lab !== me) return;
      showMachine(machines[0] || '');
      if (focusTerm && (document.activeElement === document.body || document.activeElement === $('lab-title'))) {
        me.console.term.focus();
      }
    }, (e) => {
      if (lab !== me) return;
      S.labError = t('console.loadError', { what: e.message });
      renderSessionView();
    });
  }

  /* Show machine `name`'s terminal (opening its console the first time). */
  function showMachine(name) {
    if (!lab) return;
    let c = lab.consoles[name];
    if (!c) {
      const pane = el('div', { class: 'term-pane', 'data-machine': name });
      $('terminal').append(pane);
      c = new Console(lab.sid, pane, lab.runtime, name || null);
      lab.consoles[name] = c;
    }
    for (const k of Object.keys(lab.consoles)) lab.consoles[k].container.hidden = k !== name;
    lab.console = c;
    c.fit();
    c.render();
    renderTabs();
  }

  /* One tab per machine (none for a single machine): a tablist, arrow keys
   * move between the tabs. */
  function renderTabs() {
    const box = $('machine-tabs');
    const ms = lab ? lab.machines : [];
    box.hidden = ms.length < 2;
    if (ms.length < 2) {
      box.replaceChildren();
      return;
    }
    const cur = lab.console ? lab.console.machine : ms[0];
    const had = box.contains(document.activeElement);
    box.replaceChildren(...ms.map((m) => {
      const b = el('button', { type: 'button', id: 'tab-' + m, 'data-machine': m, text: m });
      b.setAttribute('role', 'tab');
      b.setAttribute('aria-selected', String(m === cur));
      b.setAttribute('aria-controls', 'terminal');
      b.tabIndex = m === cur ? 0 : -1;
      b.addEventListener('click', () => showMachine(m));
      b.addEventListener('keydown', (e) => {
        const i = ms.indexOf(m);
        let j = -1;
        if (e.key === 'ArrowRight') j = (i + 1) % ms.length;
        else if (e.key === 'ArrowLeft') j = (i + ms.length - 1) % ms.length;
        else if (e.key === 'Home') j = 0;
        else if (e.key === 'End') j = ms.length - 1;
        if (j < 0) return;
        e.preventDefault();
        showMachine(ms[j]);
        $('tab-' + ms[j]).focus();
      });
      return b;
    }));
    if (had && $('tab-' + cur)) $('tab-' + cur).focus();
  }

  function leaveLab() {
    if (!lab) return;
    for (const c of Object.values(lab.consoles)) c.stop();
    $('terminal').replaceChildren();
    lab = null;
    renderTabs();
  }

  function renderLab(s) {
    renderNote('lab-note');
    $('lab-title').textContent = lessonTitle(s.lesson);
    const g = $('grade');
    // aria-disabled, not disabled: a disabled button would drop the focus
    g.setAttribute('aria-disabled', String(S.gradeBusy));
    g.textContent = S.gradeBusy ? t('lab.grading') : t('lab.grade');
    const le = $('lab-error');
    le.hidden = !S.labError;
    le.textContent = S.labError || '';
    renderRemaining();
    renderGrade();
    if (lab && lab.console) lab.console.render();
    updateTitle();
  }

  function remainingNow() {
    if (!S.remain) return null;
    return S.remain.s - (Date.now() - S.remain.at) / 1000;
  }

  function renderRemaining() {
    const left = remainingNow();
    const r = $('remaining');
    r.textContent = left === null ? '–' : fmtClock(left);
    r.classList.toggle('low', left !== null && left < 300);
    if (left !== null && left <= 0 && S.view === 'lab' && !refreshing) {
      S.remain = { s: 5, at: Date.now() };   // ask again in 5 s, not every tick
      refreshSession();
    }
  }

  function renderGrade() {
    const g = S.grade;
    const panel = $('grade-panel');
    panel.hidden = false;
    if (!g) {
      // before the first grade: what Grade will do
      const l = S.session && S.lessons.find((x) => x.id === S.session.lesson);
      panel.dataset.result = 'none';
      $('grade-summary').textContent = t('grade.none');
      $('grade-at').textContent = l && l.grader_steps ? t('grade.hint', { n: l.grader_steps }) : '';
      $('grade-steps').replaceChildren();
      return;
    }
    const all = g.passed === g.total;
    panel.dataset.result = all ? 'pass' : 'fail';
    $('grade-summary').textContent = t('grade.summary', { passed: g.passed, total: g.total });
    const at = Date.parse(g.graded_at || '');
    $('grade-at').textContent = isNaN(at) ? '' : t('grade.at', { time: fmtTime(at) });
    const ol = $('grade-steps');
    ol.replaceChildren();
    for (const st of g.steps || []) {
      // a step's name in the page's language, when the grader gives one
      const name = (st.i18n && st.i18n[lang] && st.i18n[lang].name) || st.name;
      const detail = st.timed_out ? t('grade.timeout')
        : (st.exit_code !== null && st.exit_code !== undefined) ? t('grade.exit', { code: st.exit_code }) : '';
      ol.append(el('li', { class: 'step ' + (st.passed ? 'pass' : 'fail'), 'data-passed': String(!!st.passed),
        'data-machine': st.machine || null },
        el('div', { class: 'step-head' },
          el('span', { class: 'verdict', text: st.passed ? t('grade.pass') : t('grade.fail') }),
          st.machine ? el('span', { class: 'step-machine', text: st.machine }) : null,
          el('span', { class: 'step-name', text: name }),
          detail ? el('span', { class: 'muted', text: detail }) : null),
        el('pre', { class: 'output', text: st.output ? st.output : t('grade.noOutput') })));
    }
    // an output that scrolls can be reached (and scrolled) with the keyboard
    ol.querySelectorAll('pre.output').forEach((p) => {
      if (p.scrollHeight > p.clientHeight + 1) p.tabIndex = 0;
    });
  }

  function gradeWords(g) {
    const failed = (g.steps || []).filter((st) => !st.passed)
      .map((st) => (st.i18n && st.i18n[lang] && st.i18n[lang].name) || st.name);
    return t('grade.summary', { passed: g.passed, total: g.total }) +
      (failed.length ? '. ' + t('grade.failedSteps', { names: failed.join(', ') }) : '');
  }

  async function grade() {
    const s = S.session;
    if (!s || S.gradeBusy) return;
    S.gradeBusy = true;
    S.labError = null;
    renderLab(s);
    const r = await api('POST', sessionPath(s.id) + '/grade', {});
    S.gradeBusy = false;
    if (!S.session || S.session.id !== s.id) return;
    if (r.status === 200) {
      S.grade = Object.assign({ graded_at: new Date(serverNow()).toISOString() }, r.data);
    } else {
      S.labError = errorText(r);
      if (r.status === 409 || r.status === 404) refreshSession();
    }
    if (S.view !== 'lab') return;
    renderLab(S.session);
    if (r.status === 200) {
      announce('grade-live', gradeWords(S.grade));
      // on a small screen the result is below the terminal: bring it into view
      const p = $('grade-panel').getBoundingClientRect();
      if (p.top < 0 || p.bottom > window.innerHeight) {
        $('grade-panel').scrollIntoView({ block: p.height > window.innerHeight ? 'start' : 'nearest' });
      }
    }
  }

  /* ----------------------------------------------------------- console */
  class Console {
    constructor(sid, container, runtime, machine) {
      this.sid = sid;
      this.container = container;
      this.machine = machine;   // null: the session's only machine
      this.runtime = runtime;
      this.maxCols = MAX_COLS;
      this.postedSize = '';
      this.sizeTimer = null;
      this.failures = 0;
      this.ws = null;
      this.open = false;
      this.busy = false;        // a ticket request is in flight
      this.stopped = false;
      this.state = 'connecting';
      this.retryAt = 0;
      this.timer = null;
      this.stableTimer = null;
      this.tooMany = false;
      this.opened = false;
      this.enc = new TextEncoder();
      this.escTimer = null;
      this.sentSize = '';
      // The terminal fills its box (fit addon) and tells the other end its
      // size: a text message on the console WebSocket (a Pod's exec stream
      // has a resize channel) and, for a VM, whose serial line has no size of
      // its own, POST /api/sessions/{id}/tty-size (the guest agent sets it on
      // the console tty).
      this.term = new window.Terminal({
        cols: 80, rows: 24, cursorBlink: true, scrollback: 5000,
        fontSize: window.matchMedia('(max-width: 40rem)').matches ? 13 : 15,
        fontFamily: '"DejaVu Sans Mono", "Noto Sans Mono", Menlo, Consolas, monospace',
        theme: { background: '#111418', foreground: '#e6e6e6' },   // = --term in app.css
        screenReaderMode: true,
      });
      this.fitter = new window.FitAddon.FitAddon();
      this.term.loadAddon(this.fitter);
      container.replaceChildren();
      this.term.open(container);
      const ta = this.term.textarea;
      if (ta) {
        ta.setAttribute('aria-label', this.machine ? t('lab.termLabelMachine', { name: this.machine })
          : t('lab.termLabel'));
        ta.setAttribute('aria-describedby', 'term-hint');
      }
      // Esc then Tab (or Shift+Tab) leaves the terminal. Tab alone is the
      // shell's (completion). Esc is held back a moment: followed by Tab it
      // was for leaving and the program never sees it (no stray Esc prefix
      // eats the next key); followed by any other key, or after ESC_HOLD_MS,
      // it goes to the program first (vi keeps working).
      this.term.attachCustomKeyEventHandler((ev) => {
        if (ev.type !== 'keydown') return true;
        const plain = !ev.ctrlKey && !ev.altKey && !ev.metaKey;
        if (ev.key === 'Escape' && plain && !ev.shiftKey) {
          this.flushEsc();
          this.escTimer = setTimeout(() => this.flushEsc(), ESC_HOLD_MS);
          return false;
        }
        if (ev.key === 'Tab' && plain && this.escTimer) {
          clearTimeout(this.escTimer);
          this.escTimer = null;
          ev.preventDefault();
          (ev.shiftKey ? $('end') : $('grade')).focus();
          return false;
        }
        if (!['Shift', 'Control', 'Alt', 'Meta', 'AltGraph', 'CapsLock'].includes(ev.key)) this.flushEsc();
        return true;
      });
      this.fit();
      this.resizeObs = new ResizeObserver(() => {
        clearTimeout(this.fitTimer);
        this.fitTimer = setTimeout(() => this.fit(), 60);
      });
      this.resizeObs.observe(container);
      this.term.onResize(() => this.sendSize());
      this.term.onData((d) => {
        this.flushEsc();
        this.send(this.enc.encode(d));
      });
      this.term.onBinary((d) => {
        const b = new Uint8Array(d.length);
        for (let i = 0; i < d.length; i++) b[i] = d.charCodeAt(i) & 255;
        this.send(b);
      });
      this.connect();
    }

    send(bytes) {
      if (this.ws && this.open && this.ws.readyState === WebSocket.OPEN) this.ws.send(bytes);
    }

    /* A held-back Esc goes to the program now. */
    flushEsc() {
      if (!this.escTimer) return;
      clearTimeout(this.escTimer);
      this.escTimer = null;
      this.send(this.enc.encode('\x1b'));
    }

    /* As many columns and rows as the box holds (at least 20 x 5). */
    fit() {
      // a hidden machine's terminal keeps its size until its tab is shown
      if (this.stopped || !this.term.element || this.container.hidden) return;
      const d = this.fitter.proposeDimensions();
      if (!d || !Number.isFinite(d.cols) || !Number.isFinite(d.rows)) return;
      const cols = Math.max(20, Math.min(this.maxCols, d.cols));
      const rows = Math.max(5, Math.min(200, d.rows));
      if (cols !== this.term.cols || rows !== this.term.rows) this.term.resize(cols, rows);
    }

    sendSize() {
      if (this.runtime !== 'pod') this.postSize();
      const size = JSON.stringify({ type: 'resize', cols: this.term.cols, rows: this.term.rows });
      if (!this.ws || !this.open || this.ws.readyState !== WebSocket.OPEN || size === this.sentSize) return;
      this.ws.send(size);
      this.sentSize = size;
    }

    /* A VM's serial console size, through the API to the guest agent, once
     * the size has settled and only when it changed. */
    postSize() {
      clearTimeout(this.sizeTimer);
      this.sizeTimer = setTimeout(async () => {
        const size = { cols: this.term.cols, rows: this.term.rows };
        if (this.machine) size.machine = this.machine;
        const key = size.cols + 'x' + size.rows;
        if (this.stopped || key === this.postedSize) return;
        const r = await api('POST', sessionPath(this.sid) + '/tty-size', size);
        if (r.status === 200) this.postedSize = key;
      }, TTY_SIZE_DELAY_MS);
    }

    setState(st) {
      const was = this.state;
      this.state = st;
      this.render();
      if (st !== was && lab && lab.console === this) {
        announce('conn-live', st === 'open' ? t('console.open') : st === 'connecting' ? t('console.connecting')
          : st === 'ended' ? t('console.ended') : t('console.retryingNow'));
      }
    }

    render() {
      if (!lab || lab.console !== this) return;
      const c = $('conn');
      c.dataset.conn = this.state;
      let text;
      if (this.state === 'open') text = t('console.open');
      else if (this.state === 'connecting') text = t('console.connecting');
      else if (this.state === 'ended') text = t('console.ended');
      else {
        const s = Math.ceil((this.retryAt - Date.now()) / 1000);
        text = s > 0 ? t('console.retrying', { s }) : t('console.retryingNow');
        if (this.tooMany) text += ' ' + t('console.tooMany');
      }
      $('conn-text').textContent = text;
      $('reconnect').hidden = this.state !== 'retrying';
    }

    async connect() {
      if (this.stopped || this.busy || this.ws) return;
      clearTimeout(this.timer);
      this.busy = true;
      this.setState('connecting');
      const r = await api('POST', sessionPath(this.sid) + '/console-ticket',
        this.machine ? { machine: this.machine } : {});
      this.busy = false;
      if (this.stopped) return;
      if (r.status !== 200 || !r.data.url) {
        // not ready / gone: the session says what to show; else try again later
        if (r.status === 409 || r.status === 404) refreshSession();
        this.retry();
        return;
      }
      const url = (location.protocol === 'https:' ? 'wss:' : 'ws:') + '//' + location.host + r.data.url;
      let ws;
      try {
        ws = new WebSocket(url, [CONSOLE_PROTO]);
      } catch (e) {
        this.retry();
        return;
      }
      ws.binaryType = 'arraybuffer';
      this.ws = ws;
      this.open = false;
      let closedMsg = null;
      const guard = setTimeout(() => { if (this.ws === ws && !this.open) ws.close(); }, OPEN_TIMEOUT_MS);
      ws.onmessage = (ev) => {
        if (this.ws !== ws) return;
        if (typeof ev.data !== 'string') {
          this.term.write(new Uint8Array(ev.data));
          return;
        }
        let m;
        try { m = JSON.parse(ev.data); } catch (e) { return; }
        if (m.type === 'status' && m.state === 'open') {
          clearTimeout(guard);
          this.open = true;
          this.tooMany = false;
          this.term.reset();       // the bridge replays the last screenful next
          this.sentSize = '';
          this.sendSize();
          this.setState('open');
          this.opened = true;
          clearTimeout(this.stableTimer);
          this.stableTimer = setTimeout(() => { this.failures = 0; }, STABLE_MS);
        } else if (m.type === 'closed') {
          closedMsg = m;
        }
      };
      ws.onclose = (ev) => {
        clearTimeout(guard);
        clearTimeout(this.stableTimer);
        if (this.ws !== ws) return;
        this.ws = null;
        this.open = false;
        if (this.stopped) return;
        const code = (closedMsg && closedMsg.code) || ev.code;
        if (code === 4410) {           // the session ended: no reconnecting
          this.setState('ended');
          refreshSession();
          return;
        }
        if (code === 4409 || code === 4403) refreshSession();
        if (code === 4429) this.tooMany = true;
        this.retry();
      };
    }

    retry() {
      if (this.stopped) return;
      this.failures++;
      const base = Math.min(BACKOFF_MAX_MS, 500 * 2 ** Math.min(this.failures, 7));
      const delay = Math.round(base / 2 + Math.random() * base / 2);
      this.retryAt = Date.now() + delay;
      this.setState('retrying');
      clearTimeout(this.timer);
      this.timer = setTimeout(() => this.connect(), delay);
    }

    reconnectNow() {
      if (this.stopped || this.ws || this.busy) return;
      clearTimeout(this.timer);
      this.connect();
    }

    stop() {
      this.stopped = true;
      clearTimeout(this.timer);
      clearTimeout(this.stableTimer);
      clearTimeout(this.fitTimer);
      clearTimeout(this.escTimer);
      clearTimeout(this.sizeTimer);
      this.resizeObs.disconnect();
      const ws = this.ws;
      this.ws = null;
      if (ws) {
        try { ws.close(1000, 'page'); } catch (e) { /* already closing */ }
      }
      this.term.dispose();
      this.container.replaceChildren();
    }
  }

  /* ------------------------------------------------------------ events */
  function tick() {
    if (S.view === 'starting') renderElapsed();
    else if (S.view === 'queued' && S.session) renderQueued(S.session);
    else if (S.view === 'lab') {
      renderRemaining();
      if (lab && lab.console && lab.console.state === 'retrying') lab.console.render();
    } else if (S.view === 'lessons' && S.notice && S.notice.kind === 'capacity') renderCapacityWhen();
  }

  async function checkCurrent() {
    const r = await api('GET', '/api/sessions/current');
    if (r.status === 200 && S.view === 'lessons' && startBusy === null) showSession(r.data);
    return r;
  }

  function bind() {
    document.querySelectorAll('#lang-switch button').forEach((b) => {
      b.addEventListener('click', () => {
        lang = b.dataset.lang;
        try { localStorage.setItem('labvm.lang', lang); } catch (e) { /* private mode */ }
        applyTexts();
        if (S.view === 'lessons') renderLessons();
        else renderSessionView();
      });
    });
    $('notice-retry').addEventListener('click', () => { if (S.notice && S.notice.lesson) start(S.notice.lesson); });
    $('notice-queue').addEventListener('click', () => {
      if (S.notice && S.notice.lesson) { S.termOnReady = true; start(S.notice.lesson, true); }
    });
    $('leave-queue').addEventListener('click', async (e) => {
      const b = e.currentTarget;
      if (!S.session || b.getAttribute('aria-disabled') === 'true') return;
      b.setAttribute('aria-disabled', 'true');
      await endSession(S.session.id);
      b.removeAttribute('aria-disabled');
    });
    $('failed-again').addEventListener('click', (e) => start(e.currentTarget.dataset.lesson));
    document.querySelectorAll('.to-lessons').forEach((b) => b.addEventListener('click', async () => {
      S.notice = null;
      showLessons(true);
      await checkCurrent();
    }));
    $('cancel-start').addEventListener('click', async (e) => {
      const b = e.currentTarget;
      if (!S.session || b.getAttribute('aria-disabled') === 'true') return;
      b.setAttribute('aria-disabled', 'true');
      const st = await endSession(S.session.id);
      b.removeAttribute('aria-disabled');
      if (st === 200) showLessons(true);
    });
    $('grade').addEventListener('click', grade);
    const closeConfirm = () => {
      $('end-confirm').hidden = true;
      $('end').focus();          // back where the student was
    };
    $('end').addEventListener('click', () => {
      $('end-confirm').hidden = false;
      $('end-no').focus();
    });
    $('end-no').addEventListener('click', closeConfirm);
    $('end-confirm').addEventListener('keydown', (e) => {
      if (e.key === 'Escape') {
        e.preventDefault();
        closeConfirm();
      }
    });
    $('end-yes').addEventListener('click', async (e) => {
      const b = e.currentTarget;
      if (!S.session || b.getAttribute('aria-disabled') === 'true') return;
      b.setAttribute('aria-disabled', 'true');   // keeps the focus, unlike disabled
      b.textContent = t('lab.ending');
      await endSession(S.session.id);
      b.removeAttribute('aria-disabled');
      b.textContent = t('end.yes');
      $('end-confirm').hidden = true;
    });
    $('reconnect').addEventListener('click', () => { if (lab && lab.console) lab.console.reconnectNow(); });
    window.addEventListener('online', () => { if (lab && lab.console) lab.console.reconnectNow(); });
    document.addEventListener('visibilitychange', () => {
      if (document.visibilityState !== 'visible') return;
      if (S.view === 'lessons') checkCurrent();
      else if (S.view === 'starting' || S.view === 'queued' || S.view === 'lab') refreshSession();
    });
    setInterval(tick, 1000);
  }

  async function boot() {
    applyTexts();
    bind();
    const [, cur] = await Promise.all([loadLessons(), api('GET', '/api/sessions/current')]);
    if (cur.status === 200) {
      showSession(cur.data);
      return;
    }
    if (cur.status !== 404) S.notice = { kind: 'error', text: errorText(cur) };
    showLessons();
  }

  // for tests and curious students: the page's state, read-only by convention
  window.labvm = { state: S, get lang() { return lang; }, get console() { return lab && lab.console; },
    get consoles() { return lab ? lab.consoles : {}; } };

  boot();
}());
