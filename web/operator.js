/* The operator page: today's sessions, capacity, the readiness of the last
 * starts (an SVG histogram), failures, and the actions of a class (end a
 * session; warm a lesson for a class: POST /api/operator/pool). Data from
 * GET /api/operator/overview (403 for anyone not in labvm.conf operators),
 * refreshed every 5 s. English and Japanese; no inline script (CSP). */
'use strict';

const MESSAGES = {
  en: {
    title: 'Operator', loading: 'Loading…',
    'forbidden.title': 'Operators only',
    'forbidden.body': 'This page is for the operators named in labvm.conf.',
    'capacity.title': 'Capacity', 'capacity.note': 'lab VMs in the cluster / vm_capacity',
    'capacity.unknown': 'the cluster did not answer',
    'today.title': 'Today', 'today.active': 'Active', 'today.ready': 'Ready',
    'today.failed': 'Failed', 'today.all': 'All',
    'warm.title': 'Warm pool', 'warm.none': 'No warm pool on this installation: labs start cold.',
    'warm.button': 'Warm a lesson',
    'warm.lesson': 'Lesson', 'warm.count': 'VMs', 'warm.hours': 'for hours',
    'warm.idle': 'No lesson is warm: labs start cold.',
    'warm.line': '{lesson}: {ready} ready, {starting} starting (target {target}; {claimed} used, {failed} failed)',
    'warm.done': 'Warming {lesson}: {count} VMs.',
    'readiness.title': 'Readiness of the last starts',
    'readiness.summary': 'ready: {ready} (median {median} s, 90th percentile {p90} s) · failed: {failed} · not ready yet: {waiting}',
    'readiness.axis': 'seconds from Start to ready', 'readiness.failed': 'failed', 'readiness.waiting': 'waiting',
    'sessions.title': "Today's sessions", 'sessions.empty': 'No session today.',
    'failures.title': 'Failures', 'failures.empty': 'No failure.',
    'col.user': 'User', 'col.lesson': 'Lesson', 'col.stage': 'State / stage', 'col.age': 'Age',
    'col.disk': 'Disk', 'col.fallback': 'Fallback reason', 'col.when': 'When', 'col.error': 'Error',
    'age.s': '{n} s', 'age.m': '{n} min', 'age.h': '{h} h {m} min',
    'end.button': 'End', 'end.confirm': "End {user}'s session ({lesson})? Their lab machine is deleted.",
    'end.done': "{user}'s session was ended.", 'refreshed': 'Updated {time}',
    'error.status': 'The API answered {status}: {message}', 'error.network': 'The API cannot be reached.',
  },
  ja: {
    title: 'オペレーター', loading: '読み込み中…',
    'forbidden.title': 'オペレーター専用',
    'forbidden.body': 'このページは labvm.conf に登録されたオペレーターだけが使えます。',
    'capacity.title': '容量', 'capacity.note': 'クラスター内の演習 VM / vm_capacity',
    'capacity.unknown': 'クラスターが応答しません',
    'today.title': '今日', 'today.active': '稼働中', 'today.ready': '準備完了',
    'today.failed': '失敗', 'today.all': '合計',
    'warm.title': 'ウォームプール', 'warm.none': 'この環境にはウォームプールがありません。演習はコールドスタートします。',
    'warm.button': 'レッスンを事前起動',
    'warm.lesson': 'レッスン', 'warm.count': 'VM 数', 'warm.hours': '時間',
    'warm.idle': '事前起動中のレッスンはありません。演習はコールドスタートします。',
    'warm.line': '{lesson}: 準備完了 {ready}、起動中 {starting} (目標 {target}、使用済み {claimed}、失敗 {failed})',
    'warm.done': '{lesson} を事前起動します: {count} 台。',
    'readiness.title': '直近の起動の準備時間',
    'readiness.summary': '準備完了: {ready} (中央値 {median} 秒、90 パーセンタイル {p90} 秒) · 失敗: {failed} · 準備中: {waiting}',
    'readiness.axis': '開始から準備完了までの秒数', 'readiness.failed': '失敗', 'readiness.waiting': '準備中',
    'sessions.title': '今日のセッション', 'sessions.empty': '今日のセッションはありません。',
    'failures.title': '失敗', 'failures.empty': '失敗はありません。',
    'col.user': 'ユーザー', 'col.lesson': 'レッスン', 'col.stage': '状態 / 段階', 'col.age': '経過',
    'col.disk': 'ディスク', 'col.fallback': 'フォールバック理由', 'col.when': '日時', 'col.error': 'エラー',
    'age.s': '{n} 秒', 'age.m': '{n} 分', 'age.h': '{h} 時間 {m} 分',
    'end.button': '終了', 'end.confirm': '{user} さんのセッション ({lesson}) を終了しますか? 演習マシンは削除されます。',
    'end.done': '{user} さんのセッションを終了しました。', 'refreshed': '更新: {time}',
    'error.status': 'API の応答 {status}: {message}', 'error.network': 'API に接続できません。',
  },
};

let lang = pickLang();
let last = null;
let timer = null;

function pickLang() {
  const saved = localStorage.getItem('labvm.lang');
  if (saved && MESSAGES[saved]) return saved;
  for (const l of navigator.languages || [navigator.language || 'en']) {
    const base = String(l).toLowerCase().split('-')[0];
    if (MESSAGES[base]) return base;
  }
  return 'en';
}

// the states and stages of a session, as the student page has them (i18n.js,
// loaded first): 'state.*' and 'stage.short.*'
const TEXTS = window.LABVM_TEXTS || { en: {} };

function t(key, vars) {
  let s = (MESSAGES[lang] && MESSAGES[lang][key]) || (TEXTS[lang] && TEXTS[lang][key]) ||
    MESSAGES.en[key] || TEXTS.en[key] || key;
  for (const [k, v] of Object.entries(vars || {})) s = s.split(`{${k}}`).join(String(v));
  return s;
}

function applyLang() {
  document.documentElement.lang = lang;
  for (const el of document.querySelectorAll('[data-i18n]')) el.textContent = t(el.dataset.i18n);
  for (const b of document.querySelectorAll('[data-lang]')) b.setAttribute('aria-pressed', String(b.dataset.lang === lang));
  document.title = `labvm ${t('title')}`;
  if (last) render(last);
}

function show(view) {
  for (const v of document.querySelectorAll('.view')) v.hidden = v.id !== `view-${view}`;
  document.getElementById('op').dataset.view = view;
}

function el(tag, attrs, text) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  if (text !== undefined && text !== null) e.textContent = String(text);
  return e;
}

function age(s) {
  if (s === null || s === undefined) return '';
  s = Math.max(0, Math.round(s));
  if (s < 60) return t('age.s', { n: s });
  if (s < 3600) return t('age.m', { n: Math.floor(s / 60) });
  return t('age.h', { h: Math.floor(s / 3600), m: Math.floor((s % 3600) / 60) });
}

function quantile(sorted, q) {
  if (!sorted.length) return null;
  const i = Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1));
  return sorted[i];
}

const SVGNS = 'http://www.w3.org/2000/svg';
function svg(tag, attrs, text) {
  const e = document.createElementNS(SVGNS, tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  if (text !== undefined) e.textContent = String(text);
  return e;
}

const EDGES = [0, 5, 10, 15, 20, 30, 45, 60, 90, 120, 180, 300];
function chart(starts) {
  const box = document.getElementById('chart');
  box.replaceChildren();
  const bins = EDGES.map((lo, i) => ({ label: i + 1 < EDGES.length ? `${lo}–${EDGES[i + 1]}` : `${lo}+`, n: 0, cls: 'barr' }));
  let failed = 0;
  let waiting = 0;
  const ready = [];
  for (const s of starts) {
    if (s.ready_s !== null && s.ready_s !== undefined) {
      ready.push(s.ready_s);
      let i = EDGES.length - 1;
      while (i > 0 && s.ready_s < EDGES[i]) i--;
      bins[i].n++;
    } else if (s.state === 'failed') failed++;
    else if (s.state === 'starting') waiting++;
  }
  bins.push({ label: t('readiness.failed'), n: failed, cls: 'barf' });
  bins.push({ label: t('readiness.waiting'), n: waiting, cls: 'barr' });
  ready.sort((a, b) => a - b);
  const fmt = (v) => (v === null ? '–' : v.toFixed(1));
  document.getElementById('rd-summary').textContent = t('readiness.summary', {
    ready: ready.length, median: fmt(quantile(ready, 0.5)), p90: fmt(quantile(ready, 0.9)), failed, waiting,
  });
  const W = 720; const H = 220; const L = 36; const B = 40; const T = 12;
  const max = Math.max(1, ...bins.map((b) => b.n));
  const bw = (W - L - 8) / bins.length;
  const root = svg('svg', { viewBox: `0 0 ${W} ${H}`, role: 'img', 'aria-label': t('readiness.title'), id: 'readiness-svg' });
  root.appendChild(svg('line', { x1: L, y1: H - B, x2: W - 4, y2: H - B, stroke: '#889' }));
  for (let k = 0; k <= 4; k++) {
    const v = Math.round((max * k) / 4);
    const y = H - B - ((H - B - T) * v) / max;
    root.appendChild(svg('text', { x: L - 6, y: y + 4, 'text-anchor': 'end' }, v));
  }
  bins.forEach((b, i) => {
    const h = ((H - B - T) * b.n) / max;
    const x = L + i * bw + 2;
    const r = svg('rect', { x, y: H - B - h, width: Math.max(1, bw - 4), height: h, class: b.cls, 'data-n': b.n });
    r.appendChild(svg('title', {}, `${b.label}: ${b.n}`));
    root.appendChild(r);
    root.appendChild(svg('text', { x: x + (bw - 4) / 2, y: H - B + 14, 'text-anchor': 'middle' }, b.label));
  });
  root.appendChild(svg('text', { x: L + (W - L) / 2, y: H - 6, 'text-anchor': 'middle' }, t('readiness.axis')));
  box.appendChild(root);
}

function render(d) {
  last = d;
  const cap = d.capacity || {};
  document.getElementById('cap-limit').textContent = cap.limit;
  document.getElementById('cap-in-use').textContent = cap.in_use === null ? '?' : cap.in_use;
  const bar = document.getElementById('cap-bar');
  const frac = cap.in_use === null || !cap.limit ? 0 : Math.min(1, cap.in_use / cap.limit);
  bar.style.width = `${Math.round(frac * 100)}%`;
  bar.classList.toggle('full', frac >= 1);
  bar.title = cap.in_use === null ? t('capacity.unknown') : '';

  const ss = d.sessions || [];
  const count = (f) => ss.filter(f).length;
  document.getElementById('n-active').textContent = count((s) => s.state === 'starting' || s.state === 'ready');
  document.getElementById('n-ready').textContent = count((s) => s.state === 'ready');
  document.getElementById('n-failed').textContent = count((s) => s.state === 'failed');
  document.getElementById('n-all').textContent = ss.length;

  const tb = document.querySelector('#sessions tbody');
  tb.replaceChildren();
  for (const s of ss) {
    const tr = el('tr', { class: `state-${s.state}`, 'data-id': s.id, 'data-user': s.user });
    tr.appendChild(el('td', {}, s.user));
    tr.appendChild(el('td', {}, s.lesson));
    const st = `${t(`state.${s.state}`)} / ${t(`stage.short.${s.stage}`)}`;
    tr.appendChild(el('td', { class: 'stage' }, st));
    tr.appendChild(el('td', {}, age(s.age_s)));
    tr.appendChild(el('td', {}, s.disk_source || ''));
    tr.appendChild(el('td', {}, s.fallback_reason || ''));
    const td = el('td');
    if (s.state === 'starting' || s.state === 'ready') {
      const b = el('button', { type: 'button', class: 'end' }, t('end.button'));
      b.addEventListener('click', () => endSession(s));
      td.appendChild(b);
    }
    tr.appendChild(td);
    tb.appendChild(tr);
  }
  document.getElementById('sessions-empty').hidden = ss.length > 0;

  const fb = document.querySelector('#failures tbody');
  fb.replaceChildren();
  for (const f of d.failures || []) {
    const tr = el('tr', { 'data-id': f.id });
    tr.appendChild(el('td', {}, new Date(f.created_at).toLocaleString(lang)));
    tr.appendChild(el('td', {}, f.user));
    tr.appendChild(el('td', {}, f.lesson));
    tr.appendChild(el('td', {}, t(`stage.short.${f.stage}`)));
    tr.appendChild(el('td', { class: 'error' }, f.error || ''));
    fb.appendChild(tr);
  }
  document.getElementById('failures-empty').hidden = (d.failures || []).length > 0;

  const rd = d.readiness || { starts: [], n: 0 };
  document.getElementById('rd-n').textContent = rd.starts.length;
  chart(rd.starts);
  const wp = d.warm_pool || {};
  document.getElementById('warm-button').disabled = !wp.available;
  const wl = document.getElementById('warm-lessons');
  wl.replaceChildren();
  const warmLessons = (wp.lessons || []).filter((l) => l.target > 0 || l.ready > 0 || l.starting > 0);
  for (const l of warmLessons) wl.appendChild(el('li', { 'data-lesson': l.lesson }, t('warm.line', l)));
  if (wp.available) document.getElementById('warm-note').textContent = warmLessons.length ? '' : t('warm.idle');
  document.getElementById('refreshed').textContent = t('refreshed', { time: new Date().toLocaleTimeString(lang) });
}

async function api(method, path, body) {
  const opt = { method, headers: { Accept: 'application/json' }, credentials: 'same-origin' };
  if (body !== undefined) {
    opt.headers['Content-Type'] = 'application/json';
    opt.body = JSON.stringify(body);
  }
  const r = await fetch(path, opt);
  let j = null;
  try { j = await r.json(); } catch (e) { j = null; }
  return { status: r.status, json: j };
}

async function refresh() {
  clearTimeout(timer);
  const n = new URLSearchParams(location.search).get('n') || '50';
  try {
    const r = await api('GET', `/api/operator/overview?n=${encodeURIComponent(n)}`);
    if (r.status === 403) { show('forbidden'); return; }
    if (r.status !== 200) {
      document.getElementById('error-text').textContent = t('error.status', { status: r.status, message: (r.json && r.json.message) || '' });
      show('error');
    } else {
      render(r.json);
      show('main');
    }
  } catch (e) {
    document.getElementById('error-text').textContent = t('error.network');
    show('error');
  }
  timer = setTimeout(refresh, 5000);
}

async function endSession(s) {
  if (!window.confirm(t('end.confirm', { user: s.user, lesson: s.lesson }))) return;
  const r = await api('POST', `/api/operator/sessions/${encodeURIComponent(s.id)}/end`, {});
  if (r.status !== 200) {
    document.getElementById('error-text').textContent = t('error.status', { status: r.status, message: (r.json && r.json.message) || '' });
    show('error');
    return;
  }
  await refresh();
}

async function warmLesson() {
  const lesson = document.getElementById('warm-lesson').value.trim();
  const count = Number(document.getElementById('warm-count').value);
  const hours = Number(document.getElementById('warm-hours').value);
  const r = await api('POST', '/api/operator/pool', { lesson, count, until: `+${hours} hours` });
  document.getElementById('warm-result').textContent = r.status === 201
    ? t('warm.done', { lesson, count })
    : t('error.status', { status: r.status, message: (r.json && r.json.message) || '' });
  await refresh();
}

document.addEventListener('DOMContentLoaded', () => {
  document.getElementById('warm-button').addEventListener('click', warmLesson);
  for (const b of document.querySelectorAll('[data-lang]')) {
    b.addEventListener('click', () => {
      lang = b.dataset.lang;
      localStorage.setItem('labvm.lang', lang);
      applyLang();
    });
  }
  applyLang();
  refresh();
});
