/* The teacher's room (issue #29): the class of a lesson I teach, refreshed
 * live (GET /api/teacher/lessons/{id}/class every 3 s with If-None-Match:
 * 304 while nothing changed), a progress bar and a tick per grader step for
 * every student, the line, the actions (watch, take over, extend, reset,
 * end), the grades as CSV, and a side panel with the student's terminal:
 * "view" (every keystroke is dropped by the bridge, and not even sent from
 * here), "take over" switches to "control". Everything outside the lessons
 * the user teaches answers 404 (the "no class here" notice). English and
 * Japanese; no inline script (CSP). */
'use strict';

const MESSAGES = {
  en: {
    title: 'Teacher', loading: 'Loading…',
    'none.title': 'No class here', 'none.body': 'You teach no lesson on this installation.',
    'lesson.pick': 'Lesson', csv: 'Download grades (CSV)',
    counts: '{active} active ({ready} ready, {starting} starting) · {queued} waiting in line',
    'class.title': 'Class', 'class.empty': 'No student has started this lesson today.',
    'col.student': 'Student', 'col.state': 'State', 'col.progress': 'Progress', 'col.steps': 'Steps',
    'col.watchers': 'Watching', 'col.actions': 'Actions',
    progress: '{passed} of {total} steps', 'progress.none': 'not graded yet',
    'tick.pass': '{name}: passed', 'tick.fail': '{name}: not passed', 'tick.none': '{name}: not graded',
    'watch': 'Watch', 'watch.label': 'Watch the terminal of {user}',
    extend: '+10 min', 'extend.label': '+10 min for {user}',
    reset: 'Reset', 'reset.label': "Reset {user}'s lab",
    end: 'End', 'end.label': "End {user}'s lab",
    'reset.confirm': "Reset {user}'s lab? Their machine is replaced by a fresh one, in the same seat.",
    'end.confirm': "End {user}'s lab? Their machine is deleted.",
    'done.extend': '{user} has 10 more minutes.', 'done.reset': "{user}'s lab was reset: a fresh one is starting.",
    'done.end': "{user}'s lab was ended.",
    'queue.title': 'Waiting in line', 'queue.empty': 'Nobody is waiting.', 'queue.item': '{position}. {user}',
    'audit.title': 'What teachers did', 'audit.empty': 'Nothing yet.',
    'audit.item': '{time}: {teacher} {action} {student}',
    'action.watch': 'watched', 'action.take_over': 'took over', 'action.extend': 'extended',
    'action.reset': 'reset', 'action.end': 'ended',
    'panel.title': 'Terminal of {user}', 'panel.takeover': 'Take over', 'panel.giveback': 'Back to watching',
    'panel.close': 'Close', 'panel.view': 'Watching: what you type is not sent.',
    'panel.control': 'You have taken over: what you type goes to the lab.',
    'panel.connecting': 'Connecting…', 'panel.closed': 'The terminal closed: {reason}',
    'term.label': 'Terminal of {user}',
    'watcher': '{user} ({mode})', 'mode.view': 'watching', 'mode.control': 'in control',
    refreshed: 'Updated {time}',
    'error.status': 'The API answered {status}: {message}', 'error.network': 'The API cannot be reached.',
  },
  ja: {
    title: '教員', loading: '読み込み中…',
    'none.title': 'クラスがありません', 'none.body': 'この環境で担当しているレッスンはありません。',
    'lesson.pick': 'レッスン', csv: '成績をダウンロード (CSV)',
    counts: '稼働中 {active} (準備完了 {ready}、起動中 {starting}) · 順番待ち {queued}',
    'class.title': 'クラス', 'class.empty': '今日このレッスンを始めた学生はいません。',
    'col.student': '学生', 'col.state': '状態', 'col.progress': '進捗', 'col.steps': 'ステップ',
    'col.watchers': '閲覧中', 'col.actions': '操作',
    progress: '{total} ステップ中 {passed}', 'progress.none': '未採点',
    'tick.pass': '{name}: 合格', 'tick.fail': '{name}: 不合格', 'tick.none': '{name}: 未採点',
    'watch': '見る', 'watch.label': '{user} さんのターミナルを見る',
    extend: '+10 分', 'extend.label': '{user} さんに +10 分',
    reset: 'リセット', 'reset.label': '{user} さんの演習をリセット',
    end: '終了', 'end.label': '{user} さんの演習を終了',
    'reset.confirm': '{user} さんの演習をリセットしますか? マシンは同じ枠で新しいものに置き換わります。',
    'end.confirm': '{user} さんの演習を終了しますか? マシンは削除されます。',
    'done.extend': '{user} さんの時間を 10 分延ばしました。', 'done.reset': '{user} さんの演習をリセットしました。新しいマシンを起動中です。',
    'done.end': '{user} さんの演習を終了しました。',
    'queue.title': '順番待ち', 'queue.empty': '順番待ちはいません。', 'queue.item': '{position}. {user}',
    'audit.title': '教員の操作', 'audit.empty': 'まだありません。',
    'audit.item': '{time}: {teacher} が {student} を{action}',
    'action.watch': '閲覧', 'action.take_over': '操作', 'action.extend': '延長', 'action.reset': 'リセット',
    'action.end': '終了',
    'panel.title': '{user} さんのターミナル', 'panel.takeover': '操作する', 'panel.giveback': '閲覧に戻る',
    'panel.close': '閉じる', 'panel.view': '閲覧中: 入力は送られません。',
    'panel.control': '操作中: 入力は演習マシンに送られます。',
    'panel.connecting': '接続中…', 'panel.closed': 'ターミナルが閉じました: {reason}',
    'term.label': '{user} さんのターミナル',
    'watcher': '{user} ({mode})', 'mode.view': '閲覧', 'mode.control': '操作',
    refreshed: '更新: {time}',
    'error.status': 'API の応答 {status}: {message}', 'error.network': 'API に接続できません。',
  },
};
const TEXTS = window.LABVM_TEXTS || { en: {} };
const POLL_MS = 3000;

let lang = pickLang();
let lessons = [];
let lesson = null;
let etag = null;
let last = null;
let audit = [];
let timer = null;
let con = null;   // the side panel's console: { sid, user, mode, ws, term, fit }

function pickLang() {
  const saved = localStorage.getItem('labvm.lang');
  if (saved && MESSAGES[saved]) return saved;
  for (const l of navigator.languages || [navigator.language || 'en']) {
    const base = String(l).toLowerCase().split('-')[0];
    if (MESSAGES[base]) return base;
  }
  return 'en';
}

function t(key, vars) {
  let s = (MESSAGES[lang] && MESSAGES[lang][key]) || (TEXTS[lang] && TEXTS[lang][key]) ||
    MESSAGES.en[key] || TEXTS.en[key] || key;
  for (const [k, v] of Object.entries(vars || {})) s = s.split(`{${k}}`).join(String(v));
  return s;
}

const $ = (id) => document.getElementById(id);

function el(tag, attrs, text) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  if (text !== undefined && text !== null) e.textContent = String(text);
  return e;
}

function show(view) {
  for (const v of document.querySelectorAll('.view')) v.hidden = v.id !== `view-${view}`;
  $('tr').dataset.view = view;
}

function stepName(s) {
  return (lang === 'ja' && s.i18n && s.i18n.ja && s.i18n.ja.name) || s.name;
}

function applyLang() {
  document.documentElement.lang = lang;
  for (const e of document.querySelectorAll('[data-i18n]')) e.textContent = t(e.dataset.i18n);
  for (const b of document.querySelectorAll('[data-lang]')) b.setAttribute('aria-pressed', String(b.dataset.lang === lang));
  document.title = `labvm ${t('title')}`;
  fillLessons();
  if (last) render(last);
  renderAudit();
  if (con) panelText();
}

async function api(method, path, body, headers) {
  const opt = { method, headers: { Accept: 'application/json', ...(headers || {}) }, credentials: 'same-origin', cache: 'no-store' };
  if (body !== undefined) {
    opt.headers['Content-Type'] = 'application/json';
    opt.body = JSON.stringify(body);
  }
  const r = await fetch(path, opt);
  let j = null;
  try { j = await r.json(); } catch (e) { j = null; }
  return { status: r.status, json: j, etag: r.headers.get('ETag') };
}

function failed(r) {
  $('error-text').textContent = r ? t('error.status', { status: r.status, message: (r.json && r.json.message) || '' })
    : t('error.network');
  show('error');
}

/* ------------------------------------------------------------ lessons */
function fillLessons() {
  const sel = $('lesson-pick');
  sel.replaceChildren();
  for (const l of lessons) {
    const title = (lang === 'ja' && l.i18n && l.i18n.ja && l.i18n.ja.title) || l.title;
    const o = el('option', { value: l.id }, `${title} (${l.id})`);
    if (l.id === lesson) o.selected = true;
    sel.appendChild(o);
  }
  const cur = lessons.find((l) => l.id === lesson);
  $('counts').textContent = cur ? t('counts', cur) : '';
}

async function loadLessons() {
  let r;
  try { r = await api('GET', '/api/teacher/lessons'); } catch (e) { failed(null); return false; }
  if (r.status === 404) { show('none'); return false; }
  if (r.status !== 200) { failed(r); return false; }
  lessons = r.json.lessons;
  const want = decodeURIComponent(location.hash.slice(1));
  if (!lesson) lesson = (lessons.find((l) => l.id === want) || lessons[0]).id;
  fillLessons();
  return true;
}

/* ------------------------------------------------------------ the class */
function ticks(row) {
  const td = el('td', { class: 'ticks' });
  for (const s of row.steps) {
    const cls = s.passed === true ? 'pass' : s.passed === false ? 'fail' : 'none';
    const name = stepName(s);
    const label = t(`tick.${cls}`, { name });
    const sp = el('span', { class: `tick ${cls}`, role: 'img', 'aria-label': label, title: label },
      cls === 'pass' ? '✓' : cls === 'fail' ? '✗' : '·');
    td.appendChild(sp);
  }
  return td;
}

function actionButton(text, label, cls, fn) {
  const b = el('button', { type: 'button', 'aria-label': label, class: cls || '' }, text);
  b.addEventListener('click', fn);
  return b;
}

function render(d) {
  last = d;
  const steps = d.lesson.steps;
  const tb = document.querySelector('#class tbody');
  tb.replaceChildren();
  for (const row of d.students) {
    const s = row.session;
    const tr = el('tr', { class: `state-${s.state}`, 'data-user': row.user, 'data-session': s.id });
    tr.appendChild(el('th', { scope: 'row' }, row.user));
    tr.appendChild(el('td', { class: 'stage' }, `${t(`state.${s.state}`)}${s.state === 'starting' ? ' / ' + t(`stage.short.${s.stage}`) : ''}`));
    const p = row.progress;
    const ptd = el('td');
    const bar = el('progress', { max: String(p.total || 1), value: String(p.passed), 'aria-label': `${row.user}: ${t('progress', p)}` });
    ptd.appendChild(bar);
    ptd.appendChild(el('span', { class: 'muted' }, ' ' + (p.grades ? t('progress', p) : t('progress.none'))));
    tr.appendChild(ptd);
    row.steps.forEach((x, i) => { x.i18n = steps[i] && steps[i].i18n; });
    tr.appendChild(ticks(row));
    tr.appendChild(el('td', { class: 'watchers' },
      (s.watchers || []).map((w) => t('watcher', { user: w.user, mode: t(`mode.${w.mode}`) })).join(', ')));
    const act = el('td');
    if (s.state === 'ready') act.appendChild(actionButton(t('watch'), t('watch.label', row), 'watch', () => openConsole(s.id, row.user, 'view')));
    if (s.state === 'ready' || s.state === 'starting') {
      act.appendChild(actionButton(t('extend'), t('extend.label', row), 'extend', () => act1('extend', s.id, row.user, { minutes: 10 })));
      act.appendChild(actionButton(t('reset'), t('reset.label', row), 'reset danger', () => act1('reset', s.id, row.user, {})));
      act.appendChild(actionButton(t('end'), t('end.label', row), 'end danger', () => act1('end', s.id, row.user)));
    }
    tr.appendChild(act);
    tb.appendChild(tr);
  }
  $('class-empty').hidden = d.students.length > 0;
  const q = $('queue');
  q.replaceChildren();
  for (const w of d.queue) q.appendChild(el('li', { 'data-user': w.user }, t('queue.item', w)));
  $('queue-empty').hidden = d.queue.length > 0;
}

function renderAudit() {
  const ul = $('audit');
  ul.replaceChildren();
  for (const a of audit.slice(0, 20)) {
    ul.appendChild(el('li', { 'data-action': a.action }, t('audit.item', {
      time: new Date(a.at).toLocaleTimeString(lang), teacher: a.teacher, student: a.student, action: t(`action.${a.action}`),
    })));
  }
  if (!audit.length) ul.appendChild(el('li', { class: 'muted' }, t('audit.empty')));
}

async function loadAudit() {
  const r = await api('GET', `/api/teacher/audit?lesson=${encodeURIComponent(lesson)}`);
  if (r.status === 200) { audit = r.json.actions; renderAudit(); }
}

async function refresh() {
  clearTimeout(timer);
  try {
    const r = await api('GET', `/api/teacher/lessons/${encodeURIComponent(lesson)}/class`, undefined,
      etag ? { 'If-None-Match': etag } : {});
    if (r.status === 200) {
      etag = r.etag;
      render(r.json);
      show('main');
      loadAudit();
    } else if (r.status === 304) {
      show('main');
    } else if (r.status === 404) {
      show('none');
    } else {
      failed(r);
    }
    $('refreshed').textContent = t('refreshed', { time: new Date().toLocaleTimeString(lang) });
  } catch (e) {
    failed(null);
  }
  timer = setTimeout(refresh, POLL_MS);
}

async function act1(what, sid, user, body) {
  if (what === 'reset' && !window.confirm(t('reset.confirm', { user }))) return;
  if (what === 'end' && !window.confirm(t('end.confirm', { user }))) return;
  const path = `/api/teacher/sessions/${encodeURIComponent(sid)}` + (what === 'end' ? '' : `/${what}`);
  const r = await api(what === 'end' ? 'DELETE' : 'POST', path, body);
  $('action-result').textContent = r.status === 200 || r.status === 201 ? t(`done.${what}`, { user })
    : t('error.status', { status: r.status, message: (r.json && r.json.message) || '' });
  if (con && con.sid === sid && what !== 'extend') closeConsole();
  etag = null;
  await refresh();
}

/* ------------------------------------------------------------ the terminal */
function panelText() {
  $('panel-title').textContent = t('panel.title', { user: con.user });
  $('panel-mode').textContent = con.closed ? t('panel.closed', { reason: con.closed })
    : con.opened ? t(`panel.${con.mode}`) : t('panel.connecting');
  $('take-over').hidden = con.mode === 'control';
  $('give-back').hidden = con.mode !== 'control';
  if (con.term && con.term.textarea) con.term.textarea.setAttribute('aria-label', t('term.label', { user: con.user }));
}

function closeConsole() {
  if (!con) return;
  if (con.ws) { con.ws.onclose = null; con.ws.close(1000); }
  if (con.term) con.term.dispose();
  con = null;
  $('panel').hidden = true;
  document.querySelector('.room').classList.remove('with-panel');
}

async function openConsole(sid, user, mode) {
  const keepTerm = con && con.sid === sid ? con : null;
  if (con && con.ws) { con.ws.onclose = null; con.ws.close(1000); }
  if (con && !keepTerm) closeConsole();
  con = keepTerm || { sid, user };
  Object.assign(con, { mode, opened: false, closed: null, ws: null });
  $('panel').hidden = false;
  document.querySelector('.room').classList.add('with-panel');
  if (!con.term) {
    con.term = new window.Terminal({ cols: 80, rows: 24, scrollback: 2000, screenReaderMode: true,
      fontFamily: '"DejaVu Sans Mono", "Noto Sans Mono", monospace', theme: { background: '#111418', foreground: '#e6e6e6' } });
    con.fit = new window.FitAddon.FitAddon();
    con.term.loadAddon(con.fit);
    con.term.open($('terminal'));
    con.enc = new TextEncoder();
    // Esc leaves the terminal (to the panel's buttons); watching, Tab moves on too
    con.term.attachCustomKeyEventHandler((ev) => {
      if (ev.type !== 'keydown') return true;
      if (ev.key === 'Escape') { $(con.mode === 'control' ? 'give-back' : 'take-over').focus(); return false; }
      if (ev.key === 'Tab' && con.mode !== 'control') return false;
      return true;
    });
    con.term.onData((d) => {
      // watching: nothing is sent (and the bridge would drop it anyway)
      if (con && con.mode === 'control' && con.ws && con.ws.readyState === 1) con.ws.send(con.enc.encode(d));
    });
    try { con.fit.fit(); } catch (e) { /* not laid out yet */ }
  }
  panelText();
  $('panel-title').focus();
  const r = await api('POST', `/api/teacher/sessions/${encodeURIComponent(sid)}/console-ticket`, { machine: null, mode });
  if (r.status !== 200) {
    con.closed = (r.json && r.json.message) || String(r.status);
    panelText();
    return;
  }
  const c = con;
  const ws = new WebSocket(`${location.protocol === 'https:' ? 'wss' : 'ws'}://${location.host}${r.json.url}`, ['labvm-console.v1']);
  ws.binaryType = 'arraybuffer';
  c.ws = ws;
  ws.onmessage = (ev) => {
    if (typeof ev.data === 'string') {
      let m = null;
      try { m = JSON.parse(ev.data); } catch (e) { return; }
      if (m.type === 'status' && m.state === 'open') { c.opened = true; panelText(); }
      if (m.type === 'closed') { c.closed = m.reason || String(m.code); panelText(); }
    } else {
      c.term.write(new Uint8Array(ev.data));
    }
  };
  ws.onclose = (ev) => {
    if (con !== c) return;
    c.closed = c.closed || ev.reason || String(ev.code);
    panelText();
    etag = null;
  };
  etag = null;   // the watchers column changes
}

document.addEventListener('DOMContentLoaded', async () => {
  for (const b of document.querySelectorAll('[data-lang]')) {
    b.addEventListener('click', () => {
      lang = b.dataset.lang;
      localStorage.setItem('labvm.lang', lang);
      applyLang();
    });
  }
  $('lesson-pick').addEventListener('change', () => {
    lesson = $('lesson-pick').value;
    location.hash = encodeURIComponent(lesson);
    etag = null;
    closeConsole();
    fillLessons();
    $('csv').href = `/api/teacher/lessons/${encodeURIComponent(lesson)}/grades.csv`;
    refresh();
  });
  $('take-over').addEventListener('click', () => con && openConsole(con.sid, con.user, 'control'));
  $('give-back').addEventListener('click', () => con && openConsole(con.sid, con.user, 'view'));
  $('panel-close').addEventListener('click', closeConsole);
  applyLang();
  if (!(await loadLessons())) return;
  $('csv').href = `/api/teacher/lessons/${encodeURIComponent(lesson)}/grades.csv`;
  show('main');
  refresh();
});
