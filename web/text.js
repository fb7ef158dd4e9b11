/* labvm student page: its words. The language, t(), the formats, the texts
 * put into the page, the tab's title and the live regions.
 *
 * The page is a few plain scripts (no build step), each with one job, that
 * share one namespace, window.labvm, which this first one makes:
 *
 *   index.html loads  i18n.js     the texts (EN, JA)
 *                     text.js     this file: words, and $ / el for the DOM
 *                     api.js      api(), errorText, the server's clock
 *                     app.js      the views, the lessons, Start, boot
 *   app.js loads, when a session shows (as it loads xterm.js):
 *                     session.js  follow a session: events or polls; the
 *                                 queued, starting, failed and ended views
 *                     console.js  class Console: one terminal on the bridge
 *                     lab.js      the lab view: machines, time left, grade
 *                     guidepane.js the lesson guide beside the terminal
 *
 * Each file is an IIFE that takes what it needs from window.labvm and adds
 * what it offers. window.labvm.state, .lang and .console are also read by
 * the tests (and curious students): read-only by convention.
 */
'use strict';

(function () {
  const L = window.labvm = {};
  const TEXTS = window.LABVM_TEXTS;
  const $ = (id) => document.getElementById(id);

  function el(tag, attrs, ...kids) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === null || v === undefined || v === false) continue;
      if (k === 'class') e.className = v;
      else if (k === 'text') e.textContent = v;
      else if (k.startsWith('data-') || k.startsWith('aria-') || k === 'role') e.setAttribute(k, v);
      else e[k] = v;
    }
    for (const c of kids) if (c !== null && c !== undefined) e.append(c);
    return e;
  }

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

  // what the other parts add to a change of language (terminal labels, the guide)
  const textHooks = [];

  function applyTexts() {
    document.documentElement.lang = lang;
    document.querySelectorAll('[data-i18n]').forEach((e) => { e.textContent = t(e.dataset.i18n); });
    document.querySelectorAll('[data-i18n-label]').forEach((e) => {
      e.setAttribute('aria-label', t(e.dataset.i18nLabel));
    });
    document.querySelectorAll('#lang-switch button').forEach((b) => {
      b.setAttribute('aria-pressed', String(b.dataset.lang === lang));
    });
    for (const f of textHooks) f();
    updateTitle();
  }

  /* The student's choice of language, kept for this browser. */
  function setLang(l) {
    if (!TEXTS[l]) return;
    lang = l;
    try { localStorage.setItem('labvm.lang', lang); } catch (e) { /* private mode */ }
    applyTexts();
  }

  // a lesson's own text in the page's language, when the lesson has it
  function lessonText(l, field) {
    const tr = l.i18n && l.i18n[lang];
    return (tr && tr[field]) || l[field];
  }

  function lessonTitle(id) {
    const l = L.state.lessons.find((x) => x.id === id);
    return l ? lessonText(l, 'title') : id;
  }

  /* The tab's title follows the view: a student with several tabs knows which is which. */
  function updateTitle() {
    const S = L.state;
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

  Object.defineProperty(L, 'lang', { enumerable: true, get: () => lang });
  Object.assign(L, {
    TEXTS, $, el, t, fmtDuration, fmtClock, fmtTime, applyTexts, setLang, lessonText, lessonTitle,
    updateTitle, announce, onTexts: (f) => { textHooks.push(f); },
  });
}());
