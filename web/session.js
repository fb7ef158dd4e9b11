/* labvm student page: following a session. Which view the session's state
 * asks for, and the views before and after the lab: queued (a place in
 * line), starting (the stages), failed, ended.
 *
 *   - starting: the session's event stream (EventSource on
 *     /api/sessions/{id}/events: one event per stage change, the session
 *     JSON in each, the final one at ready, failed or ended); while the
 *     stream is not open (blocked, refused, reconnecting) GET
 *     /api/sessions/{id} every second until ready or failed. A stream the
 *     server refused (404, 503 streams_full, 204) is not tried again for
 *     that session: polling it is.
 *   - queued: polls (which keep the place and move the line); the answer
 *     turns into the session when it is this student's turn.
 *   - ready: the lab view (lab.js), polled every 20 s.
 *
 * Loaded by app.js when a session shows (window.labvm.session).
 */
'use strict';

(function () {
  const L = window.labvm;
  if (L.session) return;
  const { $, t, api, sessionPath } = L;
  const S = L.state;
  const STAGES = ['submitted', 'scheduling', 'booting', 'setting_up', 'ready'];
  const POLL_STARTING_MS = 1000;
  const POLL_READY_MS = 20000;

  /* ------------------------------------------------------------- polls */
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

  /* ------------------------------------------------------ event stream */
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
        L.showLessons();           // gone (or not ours any more)
      } else {
        S.offline = true;          // keep polling; say so while starting
        renderSessionView();
        schedulePoll(S.session.state === 'starting' || S.session.state === 'queued' ? 2000 : POLL_READY_MS / 4);
      }
    })();
    return refreshing;
  }

  /* ------------------------------------------------------------- views */
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
        L.lab.leave();
        L.show('queued', focus);
        L.preloadLab();
        schedulePoll(((s.queue && s.queue.poll_s) || 2) * 1000);
        break;
      }
      case 'lapsed':
      case 'left':
        S.session = null;
        S.notice = s.state === 'lapsed' ? { kind: 'error', lesson: s.lesson, text: t('queue.lapsed'), code: 'lapsed' } : null;
        L.showLessons(true);
        return;
      case 'starting': {
        L.lab.leave();
        if (S.view !== 'starting') S.stageSaid = null;
        L.show('starting', focus);
        L.preloadLab();
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
        L.show('lab', focus && !wantTerm);
        L.lab.enter(s, wantTerm);
        schedulePoll(POLL_READY_MS);
        break;
      }
      case 'failed':
        closeStream();
        L.lab.leave();
        S.termOnReady = false;
        L.show('failed', focus);
        break;
      default:
        closeStream();
        L.lab.leave();
        S.termOnReady = false;
        L.show('ended', focus);
    }
    renderSessionView();
  }

  function renderSessionView() {
    const s = S.session;
    if (!s) return;
    if (S.view === 'starting') renderStarting(s);
    else if (S.view === 'queued') renderQueued(s);
    else if (S.view === 'lab') L.lab.render(s);
    else if (S.view === 'failed') renderFailed(s);
    else if (S.view === 'ended') renderEnded(s);
  }

  // 1st, 2nd, 3rd, 4th ... 11th, 12th, 13th, 21st; 日本語: 3番目
  function ordinal(n) {
    if (L.lang === 'ja') return String(n);
    const m100 = n % 100, m10 = n % 10;
    const suf = m100 >= 11 && m100 <= 13 ? 'th' : m10 === 1 ? 'st' : m10 === 2 ? 'nd' : m10 === 3 ? 'rd' : 'th';
    return n + suf;
  }

  function renderQueued(s) {
    const q = s.queue || {};
    $('queued-title').textContent = t('queue.heading', { title: L.lessonTitle(s.lesson) });
    const pos = $('queue-position');
    const said = q.position === 1 ? t('queue.next') + ' (' + t('queue.position', { ord: ordinal(1) }) + ')'
      : t('queue.position', { ord: ordinal(q.position) });
    if (pos.textContent !== said) pos.textContent = said;
    pos.dataset.position = String(q.position);
    $('queued-offline').hidden = !S.offline;
    const now = L.serverNow();
    const skew = L.skew();
    const est = Date.parse(q.estimate || ''), bound = Date.parse(q.no_later_than || '');
    const e = $('queue-estimate'), b = $('queue-bound');
    if (isNaN(est)) e.textContent = t('queue.unknown');
    else if (est - now < 5000) e.textContent = t('queue.estimateSoon');
    else e.textContent = t('queue.estimate', { at: L.fmtTime(est - skew), wait: L.fmtDuration((est - now) / 1000) });
    e.dataset.estimate = q.estimate || '';
    b.hidden = isNaN(bound);
    b.textContent = isNaN(bound) ? '' : t('queue.bound', { at: L.fmtTime(bound - skew), wait: L.fmtDuration((bound - now) / 1000) });
    b.dataset.bound = q.no_later_than || '';
  }

  function renderStarting(s) {
    L.renderNote('starting-note');
    $('starting-title').textContent = t('starting.heading', { title: L.lessonTitle(s.lesson) });
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
      L.announce('stage-live', t('stage.live', { stage: t('stage.' + (STAGES.includes(s.stage) ? s.stage : 'submitted')) }));
    }
    $('progress-bar').style.width = Math.round(((idx + 0.5) / STAGES.length) * 100) + '%';
    const d = s.disk || {};
    $('disk-info').textContent = d.fallback_reason
      ? t('starting.disk.fallback', { reason: d.fallback_reason })
      : d.source ? t('starting.disk.' + d.source) : '';
    $('starting-offline').hidden = !S.offline;
    renderElapsed();
    L.updateTitle();
  }

  function renderElapsed() {
    const s = S.session;
    if (!s || S.view !== 'starting') return;
    const t0 = Date.parse(s.created_at);
    $('elapsed').textContent = isNaN(t0) ? '–' : L.fmtDuration((L.serverNow() - t0) / 1000);
  }

  function renderFailed(s) {
    $('failed-title').textContent = s.ready_at ? t('failed.lost') : t('failed.heading');
    // the error starts with the stage it failed in ("setting_up: ...")
    const m = /^([a-z_]+): /.exec(s.error || '');
    const stage = m && STAGES.includes(m[1]) ? m[1] : s.stage;
    $('failed-stage').textContent = t('failed.stage', { stage: t('stage.' + stage) });
    $('failed-error').textContent = (m && STAGES.includes(m[1]) ? s.error.slice(m[0].length) : s.error) || '';
    $('failed-again').dataset.lesson = s.lesson;
    if (L.guide) L.guide.failed(s);
  }

  function renderEnded(s) {
    const r = s.end_reason;
    $('ended-text').textContent = r === 'user' ? t('ended.user')
      : r === 'expired' ? t('ended.expired')
      : r === 'idle' ? t('ended.idle') : t('ended.other', { reason: r || s.state });
    // an idle or expired lab: the same lesson again at one press
    const again = $('ended-again');
    again.hidden = r !== 'idle' && r !== 'expired';
    again.dataset.lesson = s.lesson;
    $('view-ended').dataset.reason = r || '';
  }

  function tick() {
    if (S.view === 'starting') renderElapsed();
    else if (S.view === 'queued' && S.session) renderQueued(S.session);
    else if (S.view === 'lab') L.lab.tick();
  }

  L.session = {
    show: showSession,
    render: renderSessionView,
    refresh: refreshSession,
    refreshing: () => refreshing !== null,
    stop() { closeStream(); stopPoll(); },
    tick,
  };
}());
