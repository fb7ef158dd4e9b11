/* labvm student page: the lab view. Entering and leaving the lab, one
 * terminal per machine (console.js) behind a tab each, the time left, Grade
 * and its panel, and the lesson guide's place (guidepane.js): beside the
 * terminal on a wide screen, a tab of its own on a narrow one, where Run in
 * terminal switches to the machine's terminal tab first.
 *
 * A session of several machines has one Console (its own bridge session)
 * per machine, opened when its tab is first shown (or when the guide runs
 * something there). The tabs are a tablist: arrow keys, Home and End move
 * between them.
 *
 * Loaded by app.js with the lab (window.labvm.lab).
 */
'use strict';

(function () {
  const L = window.labvm;
  if (L.lab) return;
  const { $, el, t, api, sessionPath } = L;
  const S = L.state;
  const GUIDE = '/guide';       // the guide's tab (no machine is called that: DNS-1123 labels)

  // {sid, console, consoles, machines, runtime, pane}: console is the shown
  // machine's (null while xterm.js loads); pane is 'terminal' or 'guide'
  // (the guide's tab, on a narrow screen)
  let lab = null;

  function enterLab(s, focusTerm) {
    if (lab && lab.sid === s.id) return;
    leaveLab();
    $('end-confirm').hidden = true;
    const machines = (s.vms || []).map((v) => v.machine).filter(Boolean);
    const me = { sid: s.id, console: null, consoles: {}, machines, runtime: s.runtime, pane: 'terminal' };
    lab = me;
    $('conn').dataset.conn = 'connecting';
    $('conn-text').textContent = t('lab.loadingTerminal');
    renderTabs();
    L.loadTerminal().then(() => {
      if (lab !== me) return;
      showMachine(machines[0] || '');
      if (focusTerm && (document.activeElement === document.body || document.activeElement === $('lab-title'))) {
        me.console.term.focus();
      }
    }, (e) => {
      if (lab !== me) return;
      S.labError = t('console.loadError', { what: e.message });
      L.session.render();
    });
    L.guide.open({
      sid: s.id, lesson: s.lesson, machines,
      onRun: (machine, text) => { if (lab === me) runInTerminal(machine, text); },
      onLayout: () => { if (lab === me) layoutChanged(); },
    });
  }

  /* Show machine `name`'s terminal (opening its console the first time). */
  function showMachine(name) {
    if (!lab) return;
    let c = lab.consoles[name];
    if (!c) {
      const pane = el('div', { class: 'term-pane', 'data-machine': name });
      $('terminal').append(pane);
      c = new L.Console(lab.sid, pane, lab.runtime, name || null, {
        shown: (x) => lab !== null && lab.console === x,
        sessionChanged: () => L.session.refresh(),
      });
      lab.consoles[name] = c;
    }
    for (const k of Object.keys(lab.consoles)) lab.consoles[k].container.hidden = k !== name;
    lab.console = c;
    lab.pane = 'terminal';
    applyPane();
    c.fit();
    c.render();
    renderTabs();
  }

  /* The guide's tab (narrow screens): the guide instead of the terminal. */
  function showGuideTab() {
    if (!lab || L.guide.mode() !== 'tab') return;
    lab.pane = 'guide';
    applyPane();
    renderTabs();
  }

  /* On a narrow screen either the guide or the terminal; on a wide one both. */
  function applyPane() {
    const guideShown = lab !== null && lab.pane === 'guide' && L.guide.mode() === 'tab';
    $('terminal-box').hidden = guideShown;
    $('term-hint').hidden = guideShown;
    L.guide.showTab(guideShown);
  }

  /* The guide appeared, or the screen crossed between wide and narrow. */
  function layoutChanged() {
    if (L.guide.mode() !== 'tab' && lab.pane === 'guide') lab.pane = 'terminal';
    applyPane();
    renderTabs();
    if (lab.console) lab.console.fit();
  }

  /* The guide's Run in terminal: that machine's terminal (its tab first, if
   * it is not the one shown), then the text as keystrokes, each line ended
   * by Enter. Only what the guide showed the student arrives here. */
  function runInTerminal(machine, text) {
    const me = lab;
    L.loadTerminal().then(() => {
      if (lab !== me) return;
      const name = machine && me.machines.includes(machine) ? machine : (me.machines[0] || '');
      const fromTab = me.pane === 'guide';
      if (!me.console || me.console !== me.consoles[name] || fromTab) showMachine(name);
      // the Run button is gone with the guide's tab: the focus goes to the terminal's tab
      if (fromTab) {
        const tab = $('machine-tabs').querySelector('[role="tab"][aria-selected="true"]');
        if (tab) tab.focus();
      }
      me.console.type(String(text).replace(/\r\n|\r|\n/g, '\r') + '\r');
    }, () => {});
  }

  /* The tabs: one per machine (none for a single machine), and on a narrow
   * screen with a guide the guide's tab first (then a single machine's
   * terminal is a tab too). A tablist: arrow keys move between the tabs. */
  function tabList() {
    const ms = lab ? lab.machines : [];
    const guideTab = lab !== null && L.guide.mode() === 'tab';
    const tabs = [];
    if (guideTab) tabs.push({ key: GUIDE, id: 'tab_guide', text: t('lab.guideTab'), controls: 'guide-pane', pane: 'guide' });
    if (ms.length >= 2) {
      for (const m of ms) tabs.push({ key: m, id: 'tab-' + m, text: m, controls: 'terminal', machine: m });
    } else if (guideTab) {
      tabs.push({ key: ms[0] || '', id: 'tab_terminal', text: t('lab.terminalTab'), controls: 'terminal', pane: 'terminal' });
    }
    return tabs.length >= 2 ? tabs : [];
  }

  function renderTabs() {
    const box = $('machine-tabs');
    const tabs = tabList();
    box.hidden = tabs.length < 2;
    box.dataset.i18nLabel = tabs.length && tabs[0].key === GUIDE ? 'lab.tabs' : 'lab.machines';
    box.setAttribute('aria-label', t(box.dataset.i18nLabel));
    if (tabs.length < 2) {
      box.replaceChildren();
      return;
    }
    const cur = lab.pane === 'guide' ? GUIDE : lab.console ? (lab.console.machine || '') : (lab.machines[0] || '');
    const had = box.contains(document.activeElement);
    const go = (tab) => (tab.key === GUIDE ? showGuideTab() : showMachine(tab.key));
    box.replaceChildren(...tabs.map((tab, i) => {
      const b = el('button', { type: 'button', id: tab.id, 'data-machine': tab.machine || null,
        'data-pane': tab.pane || null, text: tab.text });
      b.setAttribute('role', 'tab');
      b.setAttribute('aria-selected', String(tab.key === cur));
      b.setAttribute('aria-controls', tab.controls);
      b.tabIndex = tab.key === cur ? 0 : -1;
      b.addEventListener('click', () => go(tab));
      b.addEventListener('keydown', (e) => {
        let j = -1;
        if (e.key === 'ArrowRight') j = (i + 1) % tabs.length;
        else if (e.key === 'ArrowLeft') j = (i + tabs.length - 1) % tabs.length;
        else if (e.key === 'Home') j = 0;
        else if (e.key === 'End') j = tabs.length - 1;
        if (j < 0) return;
        e.preventDefault();
        go(tabs[j]);
        $(tabs[j].id).focus();
      });
      return b;
    }));
    const sel = tabs.find((tab) => tab.key === cur);
    if (had && sel && $(sel.id)) $(sel.id).focus();
  }

  function leaveLab() {
    if (!lab) return;
    for (const c of Object.values(lab.consoles)) c.stop();
    $('terminal').replaceChildren();
    lab = null;
    L.guide.close();
    applyPane();
    renderTabs();
  }

  /* Who has a teacher's console open on this lab (session.watchers), and in
   * which mode: the student always knows. */
  function renderWatchers(s) {
    const w = (s && s.watchers) || [];
    const p = $('lab-watchers');
    if (!p) return;
    const ctl = w.filter((x) => x.mode === 'control').map((x) => x.user);
    const view = w.filter((x) => x.mode !== 'control' && !ctl.includes(x.user)).map((x) => x.user);
    const parts = [];
    if (ctl.length) parts.push(t('lab.watchers.control', { users: [...new Set(ctl)].join(', ') }));
    if (view.length) parts.push(t('lab.watchers.view', { users: [...new Set(view)].join(', ') }));
    p.textContent = parts.join(' ');
    p.hidden = parts.length === 0;
  }

  function renderLab(s) {
    L.renderNote('lab-note');
    renderWatchers(s);
    $('lab-title').textContent = L.lessonTitle(s.lesson);
    const g = $('grade');
    // aria-disabled, not disabled: a disabled button would drop the focus
    g.setAttribute('aria-disabled', String(S.gradeBusy));
    g.textContent = S.gradeBusy ? t('lab.grading') : t('lab.grade');
    const le = $('lab-error');
    le.hidden = !S.labError;
    le.textContent = S.labError || '';
    renderRemaining();
    renderIdle(s);
    renderGrade();
    if (lab && lab.console) lab.console.render();
    L.updateTitle();
  }

  /* ---------------------------------------- about to end (issue #28) */
  // The session JSON says when a warning is due (warning_s before the next
  // of idle_ends_at and expires_at) and, once it is, carries `warning`
  // {kind, ends_at}. The page asks again at that moment, counts down while
  // the banner shows (asking every few seconds: typing in the terminal
  // postpones the idle end too), and once more at the end (which shows the
  // ended view). Nothing is written into the terminal.
  const WARN_POLL_MS = 3000;
  let warnAsked = null;   // the warning moment already asked about
  let warnPolled = 0;     // Date.now() of the last poll while the banner shows
  let warnSaid = null;    // the ends_at announced to screen readers
  let idleBusy = false;

  function nextWarnAt(s) {
    const ends = [Date.parse(s.idle_ends_at || ''), Date.parse(s.expires_at || '')].filter((v) => !isNaN(v));
    if (!ends.length || typeof s.warning_s !== 'number') return null;
    return Math.min(...ends) - s.warning_s * 1000;
  }

  function renderIdle(s) {
    const b = $('idle-banner');
    const w = s && s.state === 'ready' ? s.warning : null;
    if (!w) {
      b.hidden = true;
      b.dataset.kind = '';
      return;
    }
    const ends = Date.parse(w.ends_at);
    const left = Math.max(0, (ends - L.serverNow()) / 1000);
    b.dataset.kind = w.kind;
    $('idle-banner-title').textContent = t('idle.title.' + w.kind);
    $('idle-banner-text').textContent = t('idle.text.' + w.kind);
    $('idle-countdown').textContent = L.fmtClock(left);
    const stay = $('idle-stay'), ext = $('idle-extend');
    stay.hidden = w.kind !== 'idle';
    ext.hidden = w.kind !== 'expiry' || !(s.extensions_left > 0);
    ext.textContent = t('idle.extendLeft', { min: Math.round((s.extend_minutes || 0) * 10) / 10, n: s.extensions_left });
    stay.setAttribute('aria-disabled', String(idleBusy));
    ext.setAttribute('aria-disabled', String(idleBusy));
    b.hidden = false;
    if (warnSaid !== w.ends_at) {
      warnSaid = w.ends_at;
      $('idle-banner-error').hidden = true;
      L.announce('idle-live', t('idle.live.' + w.kind, { left: L.fmtDuration(left) }));
    }
  }

  function idleTick() {
    const s = S.session;
    if (!s || s.state !== 'ready' || S.view !== 'lab' || L.session.refreshing()) return;
    const now = L.serverNow();
    if (s.warning) {
      const ends = Date.parse(s.warning.ends_at);
      // at the end (the GET ends it: the ended view), and every few seconds
      if (now >= ends + 500 || Date.now() - warnPolled >= WARN_POLL_MS) {
        warnPolled = Date.now();
        L.session.refresh();
      }
      return;
    }
    const at = nextWarnAt(s);
    if (at !== null && now >= at && warnAsked !== at) {
      warnAsked = at;
      warnPolled = Date.now();
      L.session.refresh();
    }
  }

  async function idleAct(what) {
    const s = S.session;
    if (!s || idleBusy) return;
    idleBusy = true;
    renderIdle(s);
    const r = await api('POST', sessionPath(s.id) + '/' + what, {});
    idleBusy = false;
    if (!S.session || S.session.id !== s.id) return;
    if (r.status === 200) {
      L.announce('idle-live', what === 'extend'
        ? t('idle.extended', { at: L.fmtTime(Date.parse(r.data.expires_at) - L.skew()) })
        : t('idle.kept'));
      L.session.show(r.data);
      return;
    }
    const e = $('idle-banner-error');
    e.textContent = L.errorText(r);
    e.hidden = false;
    renderIdle(S.session);
    if (r.status === 409 || r.status === 404) L.session.refresh();
  }

  function remainingNow() {
    if (!S.remain) return null;
    return S.remain.s - (Date.now() - S.remain.at) / 1000;
  }

  function renderRemaining() {
    const left = remainingNow();
    const r = $('remaining');
    r.textContent = left === null ? '–' : L.fmtClock(left);
    r.classList.toggle('low', left !== null && left < 300);
    if (left !== null && left <= 0 && S.view === 'lab' && !L.session.refreshing()) {
      S.remain = { s: 5, at: Date.now() };   // ask again in 5 s, not every tick
      L.session.refresh();
    }
  }

  function stepName(st) {
    // a step's name in the page's language, when the grader gives one
    return (st.i18n && st.i18n[L.lang] && st.i18n[L.lang].name) || st.name;
  }

  function renderGrade() {
    const g = S.grade;
    const panel = $('grade-panel');
    panel.hidden = false;
    L.guide.setResults(g);      // the guide's ticks follow the grade
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
    $('grade-at').textContent = isNaN(at) ? '' : t('grade.at', { time: L.fmtTime(at) });
    const ol = $('grade-steps');
    ol.replaceChildren();
    for (const st of g.steps || []) {
      const detail = st.timed_out ? t('grade.timeout')
        : (st.exit_code !== null && st.exit_code !== undefined) ? t('grade.exit', { code: st.exit_code }) : '';
      ol.append(el('li', { class: 'step ' + (st.passed ? 'pass' : 'fail'), 'data-passed': String(!!st.passed),
        'data-machine': st.machine || null },
        el('div', { class: 'step-head' },
          el('span', { class: 'verdict', text: st.passed ? t('grade.pass') : t('grade.fail') }),
          st.machine ? el('span', { class: 'step-machine', text: st.machine }) : null,
          el('span', { class: 'step-name', text: stepName(st) }),
          detail ? el('span', { class: 'muted', text: detail }) : null),
        el('pre', { class: 'output', text: st.output ? st.output : t('grade.noOutput') })));
    }
    // an output that scrolls can be reached (and scrolled) with the keyboard
    ol.querySelectorAll('pre.output').forEach((p) => {
      if (p.scrollHeight > p.clientHeight + 1) p.tabIndex = 0;
    });
  }

  function gradeWords(g) {
    const failed = (g.steps || []).filter((st) => !st.passed).map(stepName);
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
      S.grade = Object.assign({ graded_at: new Date(L.serverNow()).toISOString() }, r.data);
    } else {
      S.labError = L.errorText(r);
      if (r.status === 409 || r.status === 404) L.session.refresh();
    }
    if (S.view !== 'lab') return;
    renderLab(S.session);
    if (r.status === 200) {
      L.announce('grade-live', gradeWords(S.grade));
      // on a small screen the result is below the terminal: bring it into view
      const p = $('grade-panel').getBoundingClientRect();
      if (p.top < 0 || p.bottom > window.innerHeight) {
        $('grade-panel').scrollIntoView({ block: p.height > window.innerHeight ? 'start' : 'nearest' });
      }
    }
  }

  function tick() {
    renderRemaining();
    if (S.session) renderIdle(S.session);
    idleTick();
    if (lab && lab.console && lab.console.state === 'retrying') lab.console.render();
  }

  // the terminals' names and the tabs follow the language
  L.onTexts(() => {
    for (const c of lab ? Object.values(lab.consoles) : []) {
      const ta = c.term.textarea;
      if (ta) ta.setAttribute('aria-label', c.machine ? t('lab.termLabelMachine', { name: c.machine }) : t('lab.termLabel'));
    }
    renderTabs();
  });

  // for tests and curious students: the shown terminal, and every machine's
  Object.defineProperty(L, 'console', { enumerable: true, get: () => lab && lab.console });
  Object.defineProperty(L, 'consoles', { enumerable: true, get: () => (lab ? lab.consoles : {}) });

  L.lab = {
    enter: enterLab,
    leave: leaveLab,
    render: renderLab,
    grade,
    tick,
    stay: () => idleAct('activity'),
    extend: () => idleAct('extend'),
    reconnect() { if (lab && lab.console) lab.console.reconnectNow(); },
    showMachine,
  };
}());
