/* labvm student page: the shell. The views, the lessons and Start, what the
 * lab needs loaded, the buttons, the clock tick, boot.
 *
 * No framework and no build step: plain scripts sharing window.labvm (see
 * text.js for the list), i18n.js and the vendored xterm.js with its fit
 * addon and markdown-it (web/vendor, copied from npm by make: manifest.json
 * names the versioned URLs). The lesson list needs only i18n.js, text.js,
 * api.js and this file; the lab's own scripts, xterm.js and the guide's
 * renderer load when a session shows (or Start is pressed). Everything the
 * server says is shown with textContent, never as HTML.
 *
 * For every student: the page never moves focus into the terminal by itself
 * (only right after the student pressed Start and stayed put); Esc then Tab
 * leaves the terminal (xterm.js takes Tab for the shell); xterm.js's
 * screen-reader mode is on; stage, connection and grade changes are said in
 * live regions; focus moves to the new view's heading when a view replaces
 * the one it was in. The terminal fits its box (phones too) and tells the
 * bridge its size (a text message {"type":"resize","cols","rows"}).
 *
 * Views: loading -> lessons -> starting -> lab -> ended, or failed (and
 * queued, waiting in line, before starting).
 *   - The open session is the page's truth: on load, on a 409 session_exists
 *     (double click, second tab) and when the tab becomes visible again the
 *     page shows the session the server names (session.js).
 *   - starting: the session's event stream, or polls while it is not open
 *     (session.js).
 *   - lab: an xterm.js terminal per machine on the console bridge
 *     (console.js: tickets, reconnects with backoff, 4410 = ended), time
 *     left and Grade (lab.js), the lesson's guide beside it (guidepane.js).
 */
'use strict';

(function () {
  const L = window.labvm;
  const { $, el, t, api, errorText } = L;

  const S = L.state = {
    view: 'loading',
    lessons: [],
    lessonsError: null,
    notice: null,        // {kind: 'capacity'|'error', ...} on the lessons view
    session: null,
    note: null,          // 'exists' | 'pool': shown above the open session
    remain: null,        // {s: remaining_s, at: Date.now()}
    grade: null,
    gradeBusy: false,
    labError: null,
    offline: false,
    termOnReady: false,  // the student pressed Start: the terminal takes focus at ready if they stayed
  };

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
    document.querySelectorAll('main > .view').forEach((e) => { e.hidden = e.id !== 'view-' + view; });
    if ((focus || lost) && prev !== undefined && HEADINGS[view]) {
      $(HEADINGS[view]).focus({ preventScroll: false });
    }
    L.updateTitle();
  }

  /* The note above the open session: it was open already (another tab), or came from the pool. */
  function renderNote(id) {
    const p = $(id);
    const note = S.note === 'exists' || S.note === 'pool' ? S.note : null;
    p.hidden = !note;
    p.textContent = note ? t(note + '.note') : '';
  }

  /* ----------------------------------------------------------- assets */
  // The lab's own scripts, xterm.js (its CSS, the fit addon) and the guide's
  // renderer (markdown-it, guide.js, guide.css) load when a lab is near: the
  // lesson list needs none of them. web/vendor/manifest.json (written by
  // make) names the vendored files' versioned URLs, which the front ends let
  // browsers keep for a year; the page's own files revalidate.
  const LAB_SCRIPTS = ['/session.js', '/console.js', '/lab.js', '/guidepane.js'];
  const loading = {};    // url -> promise: each file is added once (again only after it failed)

  function loadAsset(url, css) {
    if (loading[url]) return loading[url];
    const p = new Promise((resolve, reject) => {
      const e = document.createElement(css ? 'link' : 'script');
      if (css) { e.rel = 'stylesheet'; e.href = url; } else { e.src = url; e.async = false; }   // in order
      e.onload = () => resolve();
      e.onerror = () => { e.remove(); reject(new Error(url)); };
      document.head.append(e);
    });
    loading[url] = p;
    p.catch(() => { delete loading[url]; });    // a later lab tries again
    return p;
  }

  let vendor = null;

  function vendorFiles() {
    if (vendor) return vendor;
    vendor = (async () => {
      const files = { 'xterm.js': '/vendor/xterm.js', 'xterm.css': '/vendor/xterm.css', 'addon-fit.js': '/vendor/addon-fit.js',
        'markdown-it.umd.min.js': '/vendor/markdown-it.umd.min.js' };
      try {
        const r = await fetch('/vendor/manifest.json', { credentials: 'same-origin', cache: 'no-cache' });
        if (r.ok) return Object.assign(files, await r.json());
      } catch (e) { /* the unversioned names, this time */ }
      vendor = null;
      return files;
    })();
    return vendor;
  }

  let labReady = false;  // all of LAB_SCRIPTS ran: window.labvm.session, .lab, .Console, .guide

  const needLab = () => Promise.all(LAB_SCRIPTS.map((u) => loadAsset(u))).then(() => { labReady = true; });

  async function loadTerminal() {
    if (typeof window.Terminal === 'function' && window.FitAddon) return;
    const f = await vendorFiles();
    await Promise.all([loadAsset(f['xterm.css'], true), loadAsset(f['xterm.js']), loadAsset(f['addon-fit.js'])]);
    if (typeof window.Terminal !== 'function' || !window.FitAddon) throw new Error('/vendor/xterm.js');
  }

  async function loadGuide() {
    if (window.LabGuide && typeof window.markdownit === 'function') return;
    const f = await vendorFiles();
    await Promise.all([loadAsset('/guide.css', true), loadAsset(f['markdown-it.umd.min.js']), loadAsset('/guide.js')]);
  }

  /* Meanwhile: Start was pressed, or a session is queued or starting. */
  function preloadLab() {
    needLab().catch(() => {});
    loadTerminal().catch(() => {});
    loadGuide().catch(() => {});
  }

  /* Show a session (the server's JSON) with session.js, loaded first if need be. */
  function showSession(s, focus) {
    if (labReady) {
      L.session.show(s, focus);
      return;
    }
    preloadLab();
    needLab().then(() => L.session.show(s, focus), (e) => {
      S.notice = { kind: 'error', text: t('console.loadError', { what: e.message }) };
      showLessons(focus);
    });
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
    if (labReady) {
      L.lab.leave();
      L.session.stop();
    }
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
        el('h3', { text: L.lessonText(l, 'title') }),
        l.description ? el('p', { class: 'desc', text: L.lessonText(l, 'description') }) : null,
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
      ? t('capacity.when', { wait: L.fmtDuration(Math.ceil(left)), at: L.fmtTime(n.retryAt) })
      : t('capacity.now');
    w.dataset.retryAfter = String(n.retryAfter);
  }

  async function start(lessonId, queue) {
    if (startBusy !== null) return;   // a double click starts once
    startBusy = lessonId;
    S.notice = null;
    if (S.view === 'lessons') renderLessons();
    $('failed-again').disabled = true;
    preloadLab();                     // meanwhile: the lab's scripts and the terminal are needed soon
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
      const ra = L.retryAfterSeconds(r);
      S.notice = { kind: 'capacity', lesson: lessonId, capacity: r.data.capacity, in_use: r.data.in_use,
        retryAfter: ra, retryAt: Date.now() + ra * 1000, canQueue: r.data.can_queue === true };
    } else {
      S.notice = { kind: 'error', lesson: lessonId, text: errorText(r), code: r.data.error || r.status };
    }
    showLessons(true);
  }

  /* End (or leave the line): the answer is the session's end, or the list. */
  async function endSession(id) {
    const r = await api('DELETE', L.sessionPath(id));
    if (r.status === 200) {
      showSession(r.data);
    } else if (r.status === 404) {
      showLessons();
    } else {
      S.labError = errorText(r);
      if (labReady) L.session.render();
    }
    return r.status;
  }

  /* ------------------------------------------------------------ events */
  function tick() {
    if (S.view === 'lessons') {
      if (S.notice && S.notice.kind === 'capacity') renderCapacityWhen();
    } else if (labReady) {
      L.session.tick();
    }
  }

  async function checkCurrent() {
    const r = await api('GET', '/api/sessions/current');
    if (r.status === 200 && S.view === 'lessons' && startBusy === null) showSession(r.data);
    return r;
  }

  /* A button that ends something: once at a time (aria-disabled keeps the focus, unlike disabled). */
  function once(id, fn) {
    $(id).addEventListener('click', async (e) => {
      const b = e.currentTarget;
      if (!S.session || b.getAttribute('aria-disabled') === 'true') return;
      b.setAttribute('aria-disabled', 'true');
      try {
        await fn(b);
      } finally {
        b.removeAttribute('aria-disabled');
      }
    });
  }

  function bind() {
    document.querySelectorAll('#lang-switch button').forEach((b) => {
      b.addEventListener('click', () => {
        L.setLang(b.dataset.lang);
        if (S.view === 'lessons') renderLessons();
        else if (labReady) L.session.render();
      });
    });
    $('notice-retry').addEventListener('click', () => { if (S.notice && S.notice.lesson) start(S.notice.lesson); });
    $('notice-queue').addEventListener('click', () => {
      if (S.notice && S.notice.lesson) { S.termOnReady = true; start(S.notice.lesson, true); }
    });
    once('leave-queue', () => endSession(S.session.id));
    $('failed-again').addEventListener('click', (e) => start(e.currentTarget.dataset.lesson));
    $('ended-again').addEventListener('click', (e) => start(e.currentTarget.dataset.lesson));
    $('idle-stay').addEventListener('click', () => L.lab && L.lab.stay());
    $('idle-extend').addEventListener('click', () => L.lab && L.lab.extend());
    document.querySelectorAll('.to-lessons').forEach((b) => b.addEventListener('click', async () => {
      S.notice = null;
      showLessons(true);
      await checkCurrent();
    }));
    once('cancel-start', async () => {
      if (await endSession(S.session.id) === 200) showLessons(true);
    });
    $('grade').addEventListener('click', () => { if (labReady) L.lab.grade(); });
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
    once('end-yes', async (b) => {
      b.textContent = t('lab.ending');
      await endSession(S.session.id);
      b.textContent = t('end.yes');
      $('end-confirm').hidden = true;
    });
    $('reconnect').addEventListener('click', () => { if (labReady) L.lab.reconnect(); });
    window.addEventListener('online', () => { if (labReady) L.lab.reconnect(); });
    document.addEventListener('visibilitychange', () => {
      if (document.visibilityState !== 'visible') return;
      if (S.view === 'lessons') checkCurrent();
      else if ((S.view === 'starting' || S.view === 'queued' || S.view === 'lab') && labReady) L.session.refresh();
    });
    setInterval(tick, 1000);
  }

  async function boot() {
    L.applyTexts();
    bind();
    const [, cur] = await Promise.all([loadLessons(), api('GET', '/api/sessions/current')]);
    if (cur.status === 200) {
      showSession(cur.data);
      return;
    }
    if (cur.status !== 404) S.notice = { kind: 'error', text: errorText(cur) };
    showLessons();
  }

  Object.assign(L, { show, renderNote, showLessons, showSession, endSession, start, loadAsset, loadTerminal, loadGuide,
    preloadLab, labScripts: LAB_SCRIPTS });

  boot();
}());
