/* labvm student page: the lesson guide in the lab view (issue #30). The
 * guide's Markdown comes from GET /api/lessons/{id}/guide and is rendered by
 * web/guide.js (LabGuide, with the vendored markdown-it), loaded with the lab.
 *
 *   - Wide screens: the guide sits beside the terminal (left of it, before
 *     Grade in the reading and Tab order), with a draggable split: a
 *     role="separator" with aria-valuenow (the guide's share of the width,
 *     20..70 %), moved by pointer or by the arrow keys (Home, End, Page Up
 *     and Down too); the position is remembered in this browser
 *     (localStorage labvm.guideSplit). The terminal refits as its box
 *     changes (console.js's ResizeObserver).
 *   - Narrow screens (phones): the guide is a tab beside the terminal tab(s)
 *     (lab.js renders the tabs; here the pane moves next to the terminal).
 *   - Run in terminal hands (machine, text) to lab.js, which types it into
 *     that machine's console; opening a hint is activity (POST
 *     /api/sessions/{id}/activity; a server without that route answers 404,
 *     which is ignored). A grade's answer puts the ticks on the guide's
 *     Check headings; a change of language fetches the guide in the other
 *     language and renders it again, at the same place.
 *   - The failed view shows the guide too (broken-setup's explains its
 *     failure), without Run in terminal: there is no machine.
 *
 * Loaded by app.js with the lab (window.labvm.guide).
 */
'use strict';

(function () {
  const L = window.labvm;
  if (L.guide) return;
  const { $, api, sessionPath } = L;
  const NARROW = window.matchMedia('(max-width: 56rem)');
  const SPLIT_MIN = 20;
  const SPLIT_MAX = 70;
  const SPLIT_DEFAULT = 35;   // a 1280 px screen keeps a terminal of more than 80 columns
  const SPLIT_KEY = 'labvm.guideSplit';

  let g = null;          // the lab's LabGuide
  let cur = null;        // the open() it belongs to: {sid, lesson, machines, onRun, onLayout}
  let shownResults;      // the grade last put on the guide
  let tabShown = false;  // narrow: the guide's tab is selected
  let shownLang = null;  // the page's language the guide was rendered for

  function savedSplit() {
    let v = NaN;
    try { v = Number(localStorage.getItem(SPLIT_KEY)); } catch (e) { /* private mode */ }
    return Number.isFinite(v) && v >= SPLIT_MIN && v <= SPLIT_MAX ? v : SPLIT_DEFAULT;
  }

  let split = savedSplit();

  function mode() {
    if (!g) return 'none';
    return NARROW.matches ? 'tab' : 'side';
  }

  /* ------------------------------------------------------------ layout */
  // side: the pane sits between the lab's heading row and Grade (so Tab
  // reaches the guide before Grade, End and the terminal); tab: in the
  // terminal's column, after the tabs
  function place() {
    const pane = $('guide-pane');
    const m = mode();
    const layout = $('lab-layout');
    layout.dataset.guide = m;
    if (m === 'tab') {
      if (pane.parentElement !== $('term-col')) $('term-col').insertBefore(pane, $('terminal-box'));
    } else if (pane.parentElement !== layout) {
      layout.insertBefore(pane, $('guide-split'));
    }
    pane.hidden = m === 'none' || (m === 'tab' && !tabShown);
    $('guide-split').hidden = m !== 'side';
    applySplit();
  }

  function applySplit() {
    const layout = $('lab-layout');
    layout.style.setProperty('--guide-fr', split + 'fr');
    layout.style.setProperty('--main-fr', (100 - split) + 'fr');
    const sep = $('guide-split');
    sep.setAttribute('aria-valuenow', String(Math.round(split)));
    sep.setAttribute('aria-valuetext', L.t('guide.splitValue', { n: Math.round(split) }));
  }

  function setSplit(v, save) {
    split = Math.max(SPLIT_MIN, Math.min(SPLIT_MAX, Math.round(v * 10) / 10));
    applySplit();
    if (save) {
      try { localStorage.setItem(SPLIT_KEY, String(split)); } catch (e) { /* private mode */ }
    }
  }

  function bindSplit() {
    const sep = $('guide-split');
    sep.addEventListener('keydown', (e) => {
      const step = { ArrowLeft: -2, ArrowDown: -2, ArrowRight: 2, ArrowUp: 2, PageDown: -10, PageUp: 10 }[e.key];
      let v = null;
      if (step !== undefined) v = split + step;
      else if (e.key === 'Home') v = SPLIT_MIN;
      else if (e.key === 'End') v = SPLIT_MAX;
      if (v === null) return;
      e.preventDefault();
      setSplit(v, true);
    });
    let drag = null;
    sep.addEventListener('pointerdown', (e) => {
      if (e.button !== 0) return;
      e.preventDefault();
      sep.setPointerCapture(e.pointerId);
      drag = e.pointerId;
      sep.classList.add('dragging');
    });
    sep.addEventListener('pointermove', (e) => {
      if (drag !== e.pointerId) return;
      const r = $('lab-layout').getBoundingClientRect();
      if (r.width > 0) setSplit(((e.clientX - r.left) / r.width) * 100, false);
    });
    const end = (e) => {
      if (drag !== e.pointerId) return;
      drag = null;
      sep.classList.remove('dragging');
      setSplit(split, true);
    };
    sep.addEventListener('pointerup', end);
    sep.addEventListener('pointercancel', end);
  }

  /* -------------------------------------------------------- the guide */
  function create(host, o, lang, a) {
    const guide = window.LabGuide.create(host, {
      lang, folder: a.folder, machines: o.machines || [], headingBase: 3,
      onRun: o.onRun || null,
      onHint: () => {
        // activity (issue #28); until the route exists the 404 is ignored
        if (o.sid) api('POST', sessionPath(o.sid) + '/activity', {});
      },
    });
    guide.render(a.markdown);
    // the buttons speak the page's language; a guide served in another (no
    // Japanese guide: the English one) says which it is
    if (a.lang && a.lang !== lang) guide.body.setAttribute('lang', a.lang);
    return guide;
  }

  /* A region that scrolls is reached by keyboard: focusable itself when
   * nothing in it is. */
  function scrollable(pane) {
    const focusable = pane.querySelector('button, a[href], summary, [tabindex="0"]');
    if (focusable) pane.removeAttribute('tabindex');
    else pane.tabIndex = 0;
  }

  async function load(o, lang) {
    await L.loadGuide();
    return window.LabGuide.fetch(o.lesson, lang);
  }

  /* The lab's guide, for lesson o.lesson: fetched, rendered, placed. */
  async function open(o) {
    close();
    cur = o;
    const lang = L.lang;
    const l = L.state.lessons.find((x) => x.id === o.lesson);
    if (l && l.guide === false) return;   // the lesson list says it has none: not even asked
    let a = null;
    try {
      a = await load(o, lang);
    } catch (e) {
      a = null;                   // no guide, as for a lesson without one: the lab works
    }
    if (cur !== o || !a) return;
    const pane = $('guide-pane');
    try {
      g = create(pane, o, lang, a);
    } catch (e) {
      pane.replaceChildren();     // the renderer did not load: the lab works without
      return;
    }
    shownLang = lang;
    shownResults = undefined;
    setResults(L.state.grade);
    scrollable(pane);
    place();
    if (typeof o.onLayout === 'function') o.onLayout();
    if (L.lang !== lang) relang();    // the language changed meanwhile
  }

  /* The page's language changed: the guide in the other language, at the same place. */
  async function relang() {
    const o = cur;
    if (!o || !g || shownLang === L.lang) return;
    const lang = L.lang;
    let a = null;
    try {
      a = await load(o, lang);
    } catch (e) {
      return;                     // keep the one shown
    }
    if (cur !== o || !g || !a || L.lang !== lang) return;
    const pane = $('guide-pane');
    const at = pane.scrollHeight > pane.clientHeight ? pane.scrollTop / (pane.scrollHeight - pane.clientHeight) : 0;
    g.destroy();
    g = null;
    try {
      g = create(pane, o, lang, a);
    } catch (e) {
      pane.replaceChildren();
      close();
      if (typeof o.onLayout === 'function') o.onLayout();
      return;
    }
    shownLang = lang;
    const res = shownResults;
    shownResults = undefined;
    setResults(res);
    scrollable(pane);
    pane.scrollTop = at * (pane.scrollHeight - pane.clientHeight);
  }

  function close() {
    cur = null;
    shownLang = null;
    if (g) g.destroy();
    g = null;
    tabShown = false;
    shownResults = undefined;
    place();
  }

  function setResults(grade) {
    if (!g || grade === shownResults) return;
    shownResults = grade;
    g.setResults(grade || null);
  }

  function showTab(shown) {
    tabShown = !!shown;
    place();
  }

  /* ------------------------------------------------------- failed view */
  let failedGuide = null;   // {key, guide}
  let failedFor = null;

  async function failed(s) {
    const host = $('failed-guide');
    const l = L.state.lessons.find((x) => x.id === s.lesson);
    const key = s.lesson + ' ' + L.lang;
    if (failedFor === key) return;
    failedFor = key;
    if (!l || !l.guide) {
      if (failedGuide) failedGuide.destroy();
      failedGuide = null;
      host.hidden = true;
      return;
    }
    let a = null;
    try {
      a = await load({ lesson: s.lesson }, L.lang);
    } catch (e) {
      a = null;
    }
    if (failedFor !== key) return;
    if (failedGuide) failedGuide.destroy();
    failedGuide = null;
    host.hidden = !a;
    if (!a) return;
    try {
      failedGuide = create(host, { lesson: s.lesson, machines: [] }, L.lang, a);
    } catch (e) {
      host.replaceChildren();
      host.hidden = true;
    }
  }

  L.onTexts(() => {
    relang();
    applySplit();
    if (L.state.view === 'failed' && L.state.session) failed(L.state.session);
  });
  NARROW.addEventListener('change', () => {
    if (!g) return;
    if (!NARROW.matches) tabShown = false;
    place();
    if (cur && typeof cur.onLayout === 'function') cur.onLayout();
  });
  bindSplit();
  applySplit();

  L.guide = { open, close, mode, showTab, setResults, failed };
}());
