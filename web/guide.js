/* guide.js - the lesson guide: Markdown (markdown-it, web/vendor) rendered
 * into the page, inert, with the buttons the guide's conventions ask for.
 * No build step: one global, LabGuide; it needs window.markdownit (the
 * vendored dist/browser/markdown-it.umd.min.js) and web/guide.css. The page
 * loads all three when a lab starts, never with the lesson list.
 *
 *   const g = LabGuide.create(host, {
 *     lang: 'en' | 'ja',                // the texts of the buttons and labels
 *     folder: '/guides/<lesson>/',      // the API's "folder" (null: no images, no relative links)
 *     machines: ['cp', 'worker1'],      // the lesson's machines ([] for one machine)
 *     onRun(machine, text),             // Run in terminal: machine null = the only machine;
 *                                       //   text = the block without its last line break
 *     onHint(),                         // a hint was opened (activity)
 *     headingBase: 3,                   // "#" becomes <h3>, "##" <h4>, ... (at most <h6>)
 *   });
 *   g.render(markdown)    -> {ms, checks, runs, hints, bytes}
 *   g.setResults(grade)   // POST /api/sessions/{id}/grade's answer ({steps: [...]}); null clears
 *   g.destroy()
 *   LabGuide.fetch(lesson, lang) -> the API answer {lesson, lang, markdown, folder}, or null
 *
 * Conventions (README "Lesson guides"): a heading "Check: STEP" names a
 * grader step (STEP: its name or Japanese name; "Check: MACHINE: STEP" when
 * machines' steps share a name) and gets the step's result; a fenced block
 * with info string run or run:MACHINE gets "Run in terminal"; a blockquote
 * starting [!HINT] is a hint (collapsed); [!NOTE], [!TIP], [!IMPORTANT],
 * [!WARNING], [!CAUTION] are labelled notes.
 *
 * Safety, in layers: markdown-it with html: false (raw HTML is text) and
 * linkify: false; its validateLink lets only http, https and relative URLs
 * become links or images; the HTML it writes is parsed in an inert
 * <template>, every element and attribute not on a short allow-list is
 * dropped, images must resolve inside the guide's folder on this origin
 * (else their alt text stays), relative links resolve there too, absolute
 * links open in a new tab with rel="noopener noreferrer". No inline script
 * or event attribute is ever written (the page's CSP forbids them anyway),
 * and nothing here evaluates text: a run block's text only goes to onRun. */
'use strict';

(function () {
  const TEXTS = {
    en: {
      label: 'Lesson guide', copy: 'Copy', copied: 'Copied', copyFailed: 'Copy failed: select the text instead',
      run: 'Run in terminal', runOn: 'Run in terminal: {m}', on: 'on {m}', hint: 'Hint', check: 'Check',
      notGraded: 'not graded yet', passed: 'passed', failed: 'failed', result: 'Result: {v}',
      exit: 'exit code {c}', timedOut: 'timed out', noOutput: '(no output)', output: 'Output of {name}',
      note: 'Note', tip: 'Tip', important: 'Important', warning: 'Warning', caution: 'Caution', code: 'Code',
    },
    ja: {
      label: 'レッスンガイド', copy: 'コピー', copied: 'コピーしました', copyFailed: 'コピーできませんでした。テキストを選択してください',
      run: 'ターミナルで実行', runOn: 'ターミナルで実行: {m}', on: '{m} で実行', hint: 'ヒント', check: 'チェック',
      notGraded: '未採点', passed: '合格', failed: '不合格', result: '結果: {v}',
      exit: '終了コード {c}', timedOut: 'タイムアウト', noOutput: '(出力なし)', output: '{name} の出力',
      note: '注記', tip: 'ヒント', important: '重要', warning: '警告', caution: '注意', code: 'コード',
    },
  };
  const ALERTS = { NOTE: 'note', TIP: 'tip', IMPORTANT: 'important', WARNING: 'warning', CAUTION: 'caution' };

  /* What markdown-it writes with html: false, and the attributes kept. */
  const ALLOWED = {
    P: [], H1: [], H2: [], H3: [], H4: [], H5: [], H6: [], UL: [], OL: ['start'], LI: [], BLOCKQUOTE: [],
    PRE: ['data-info'], CODE: [], EM: [], STRONG: [], S: [], DEL: [], A: ['href', 'title'],
    IMG: ['src', 'alt', 'title'], HR: [], BR: [], TABLE: [], THEAD: [], TBODY: [], TR: [], TH: ['style'],
    TD: ['style'],
  };

  function fmt(s, vars) {
    return s.replace(/\{(\w+)\}/g, (m, k) => (vars && k in vars ? String(vars[k]) : m));
  }

  /* A URL's scheme as a browser would read it (blanks and controls gone), or ''. */
  function schemeOf(url) {
    const u = String(url).replace(/[\u0000-\u0020\u007f]/g, '').toLowerCase();
    const m = /^([a-z][a-z0-9+.-]*):/.exec(u);
    return m ? m[1] : '';
  }

  /* http, https, or relative without a leading / or \ (no //host, no site paths). */
  function linkOk(url) {
    const s = schemeOf(url);
    if (s) return s === 'http' || s === 'https';
    const u = String(url).replace(/^[\u0000-\u0020]+/, '');
    return !/^[/\\]/.test(u);
  }

  /* A relative URL inside folder (on this origin), or null. */
  function inFolder(url, folder) {
    if (!folder || schemeOf(url) || /^[\s/\\]/.test(url) || url.startsWith('#')) return null;
    const path = url.split(/[?#]/)[0];
    if (path.split('/').some((seg) => seg === '..' || (seg.startsWith('.') && seg !== '.'))) return null;
    let r;
    try {
      r = new URL(url, location.origin + folder);
    } catch (e) {
      return null;
    }
    if (r.origin !== location.origin || !r.pathname.startsWith(folder)) return null;
    return r.pathname + r.search + r.hash;
  }

  function slug(text) {
    return String(text).toLowerCase().trim().replace(/[^\p{L}\p{N}\s-]/gu, '').replace(/\s+/g, '-');
  }

  function el(tag, attrs, ...kids) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === null || v === undefined || v === false) continue;
      if (k === 'text') e.textContent = v;
      else e.setAttribute(k, v === true ? '' : v);
    }
    for (const c of kids) if (c !== null && c !== undefined) e.append(c);
    return e;
  }

  function newMarkdown() {
    if (typeof window.markdownit !== 'function') throw new Error('markdown-it is not loaded (/vendor/markdown-it.umd.min.js)');
    const md = window.markdownit({ html: false, linkify: false, typographer: false, breaks: false });
    md.validateLink = linkOk;
    const esc = md.utils.escapeHtml;
    // the info string goes to data-info (not a class: "run:cp" is no class)
    md.renderer.rules.fence = (tokens, idx) => {
      const t = tokens[idx];
      return `<pre data-info="${esc(t.info.trim())}"><code>${esc(t.content)}</code></pre>\n`;
    };
    md.renderer.rules.code_block = (tokens, idx) => `<pre><code>${esc(tokens[idx].content)}</code></pre>\n`;
    return md;
  }

  /* "Check: STEP" -> the grade's step it names (same rule as --check). */
  function findStep(steps, spec, machines) {
    const named = (st, n) => st.name === n || Object.values(st.i18n || {}).some((x) => x && x.name === n);
    let hits = steps.filter((st) => named(st, spec));
    if (!hits.length && machines.length) {
      const i = spec.indexOf(': ');
      if (i > 0 && machines.includes(spec.slice(0, i))) {
        const m = spec.slice(0, i);
        const rest = spec.slice(i + 2);
        hits = steps.filter((st) => st.machine === m && named(st, rest));
      }
    }
    return hits.length === 1 ? hits[0] : null;
  }

  class Guide {
    constructor(host, opts) {
      this.host = host;
      this.opts = Object.assign({ lang: 'en', folder: null, machines: [], headingBase: 3,
        onRun: null, onHint: null }, opts || {});
      this.texts = TEXTS[this.opts.lang] || TEXTS.en;
      this.root = el('section', { class: 'labguide', 'aria-label': this.texts.label, lang: this.opts.lang });
      this.live = el('p', { class: 'labguide-sr', role: 'status' });
      this.body = el('div', { class: 'labguide-body' });
      this.root.append(this.live, this.body);
      host.append(this.root);
      this.checks = [];
      this.results = null;
      this.n = 0;
    }

    t(key, vars) { return fmt(this.texts[key] || TEXTS.en[key] || key, vars); }

    render(markdown) {
      const t0 = performance.now();
      const ph = {};
      const lap = (k, t) => { ph[k] = Math.round(performance.now() - t); return performance.now(); };
      const md = newMarkdown();
      const tpl = document.createElement('template');
      const html = md.render(String(markdown || ''));
      let t = lap('parse', t0);
      tpl.innerHTML = html;   // inert: nothing loads or runs in a template
      const frag = tpl.content;
      this.sanitize(frag);
      t = lap('sanitize', t);
      this.checks = [];
      const stats = { checks: 0, runs: 0, hints: 0, bytes: String(markdown || '').length };
      this.alerts(frag, stats);
      this.code(frag, stats);
      this.headings(frag, stats);
      t = lap('build', t);
      this.body.replaceChildren(frag);
      lap('insert', t);
      // code wraps (guide.css: pre-wrap), so no block scrolls sideways and
      // none needs to be a tab stop; no layout is forced here
      if (this.results) this.setResults(this.results);
      stats.ms = performance.now() - t0;
      stats.phases = ph;
      return stats;
    }

    /* Only the allowed elements and attributes; links and images by the rules. */
    sanitize(frag) {
      const all = [...frag.querySelectorAll('*')];
      for (const e of all) {
        if (!e.isConnected && !frag.contains(e)) continue;
        const keep = ALLOWED[e.tagName];
        if (!keep) {
          e.replaceWith(document.createTextNode(e.textContent));
          continue;
        }
        for (const a of [...e.attributes]) {
          if (!keep.includes(a.name)) e.removeAttribute(a.name);
        }
        if (e.tagName === 'TH' || e.tagName === 'TD') {
          const m = /text-align:\s*(left|right|center)/.exec(e.getAttribute('style') || '');
          e.removeAttribute('style');
          if (m) e.className = 'align-' + m[1];
        }
        if (e.tagName === 'A') this.link(e);
        else if (e.tagName === 'IMG') this.image(e);
      }
    }

    link(a) {
      const href = a.getAttribute('href') || '';
      if (!linkOk(href)) {
        a.replaceWith(...a.childNodes);
        return;
      }
      if (schemeOf(href)) {
        a.target = '_blank';
        a.rel = 'noopener noreferrer';
        return;
      }
      if (href.startsWith('#')) {
        let frag = href.slice(1);
        try { frag = decodeURIComponent(frag); } catch (e) { /* as written */ }
        a.setAttribute('href', '#guide-' + slug(frag));
        return;
      }
      const local = inFolder(href, this.opts.folder);
      if (!local) {
        a.replaceWith(...a.childNodes);
        return;
      }
      a.setAttribute('href', local);
      a.target = '_blank';
      a.rel = 'noopener noreferrer';
    }

    image(img) {
      const local = inFolder(img.getAttribute('src') || '', this.opts.folder);
      if (!local) {
        img.replaceWith(document.createTextNode(img.getAttribute('alt') || ''));
        return;
      }
      img.setAttribute('src', local);
      img.setAttribute('loading', 'lazy');
      if (!img.hasAttribute('alt')) img.setAttribute('alt', '');
    }

    /* Heading levels from headingBase; ids prefixed (never the page's own);
     * "Check: STEP" headings get a status slot and a result box. */
    headings(frag, stats) {
      const base = Math.min(6, Math.max(1, this.opts.headingBase | 0 || 3));
      const used = new Set();
      for (const h of [...frag.querySelectorAll('h1, h2, h3, h4, h5, h6')]) {
        const level = Math.min(6, base + Number(h.tagName[1]) - 1);
        const n = document.createElement('h' + level);
        n.append(...h.childNodes);
        const text = n.textContent.trim();
        let id = 'guide-' + slug(text);
        for (let i = 2; used.has(id); i++) id = 'guide-' + slug(text) + '-' + i;
        used.add(id);
        n.id = id;
        h.replaceWith(n);
        const m = /^Check:\s*(.+)$/.exec(text);
        if (!m) continue;
        stats.checks++;
        const spec = m[1].trim();
        n.classList.add('labguide-check');
        // "Check:" becomes a label in the page's language; the step's name stays
        const first = n.firstChild;
        if (first && first.nodeType === Node.TEXT_NODE && first.data.trimStart().startsWith('Check:')) {
          first.data = first.data.trimStart().slice('Check:'.length).trimStart();
        }
        const mark = el('span', { class: 'labguide-mark', 'data-state': 'none', 'aria-hidden': 'true' });
        const state = el('span', { class: 'labguide-sr', text: this.t('notGraded') + ': ' });
        n.prepend(mark, el('span', { class: 'labguide-check-label', text: this.t('check') }), ' ', state);
        const box = el('details', { class: 'labguide-result', hidden: true });
        // the output may scroll (guide.css): reachable by keyboard
        box.append(el('summary', {}), el('pre', { class: 'labguide-output', tabindex: '0' }));
        n.after(box);
        this.checks.push({ spec, heading: n, mark, state, box });
      }
    }

    /* > [!HINT] ... -> <details>; > [!NOTE] ... -> a labelled note. */
    alerts(frag, stats) {
      for (const q of [...frag.querySelectorAll('blockquote')]) {
        const p = q.firstElementChild;
        if (!p || p.tagName !== 'P' || !p.firstChild || p.firstChild.nodeType !== Node.TEXT_NODE) continue;
        const m = /^\[!(HINT|NOTE|TIP|IMPORTANT|WARNING|CAUTION)\][ \t]*\n?/.exec(p.firstChild.data);
        if (!m) continue;
        p.firstChild.data = p.firstChild.data.slice(m[0].length);
        if (!p.textContent.trim() && !p.querySelector('img')) p.remove();
        if (m[1] === 'HINT') {
          stats.hints++;
          const d = el('details', { class: 'labguide-hint' }, el('summary', { text: this.t('hint') }));
          d.append(...q.childNodes);
          d.addEventListener('toggle', () => {
            if (d.open && typeof this.opts.onHint === 'function') this.opts.onHint();
          });
          q.replaceWith(d);
        } else {
          const kind = ALERTS[m[1]];
          const d = el('div', { class: 'labguide-alert labguide-' + kind, role: 'note' },
            el('p', { class: 'labguide-alert-label', text: this.t(kind) }));
          d.append(...q.childNodes);
          q.replaceWith(d);
        }
      }
    }

    /* Every code block: Copy; run and run:MACHINE blocks: Run in terminal. */
    code(frag, stats) {
      const machines = this.opts.machines || [];
      for (const pre of [...frag.querySelectorAll('pre')]) {
        const info = pre.getAttribute('data-info') || '';
        pre.removeAttribute('data-info');
        const text = pre.textContent.replace(/\n$/, '');
        const word = info.split(/\s+/)[0];
        let run = false;
        let machine = null;
        if (word === 'run') {
          run = true;
          machine = machines.length ? machines[0] : null;
        } else if (word.startsWith('run:')) {
          machine = word.slice(4);
          run = machines.includes(machine);
        }
        const id = 'guide-code-' + (++this.n);
        pre.id = id;
        const bar = el('div', { class: 'labguide-bar' });
        if (run && machine && machines.length) bar.append(el('span', { class: 'labguide-machine', text: this.t('on', { m: machine }) }));
        const copy = el('button', { type: 'button', class: 'labguide-copy', 'aria-controls': id, text: this.t('copy') });
        copy.addEventListener('click', () => this.copy(copy, text, pre));
        bar.append(copy);
        if (run) {
          stats.runs++;
          const b = el('button', { type: 'button', class: 'labguide-run', 'aria-controls': id,
            'data-machine': machine || null,
            'aria-label': machine && machines.length ? this.t('runOn', { m: machine }) : null,
            text: this.t('run') });
          b.addEventListener('click', () => {
            if (typeof this.opts.onRun === 'function') this.opts.onRun(machine, text);
          });
          bar.append(b);
        }
        const box = el('div', { class: 'labguide-code' + (run ? ' labguide-runblock' : '') });
        pre.replaceWith(box);
        box.append(bar, pre);
      }
    }

    async copy(button, text, pre) {
      let ok = false;
      try {
        await navigator.clipboard.writeText(text);
        ok = true;
      } catch (e) {
        // no clipboard here (a page over plain HTTP, a refusal): select the
        // block so that the student's own copy key takes it
        ok = false;
        const r = document.createRange();
        r.selectNodeContents(pre);
        const sel = window.getSelection();
        sel.removeAllRanges();
        sel.addRange(r);
      }
      const was = this.t('copy');
      button.textContent = ok ? this.t('copied') : this.t('copy');
      this.live.textContent = ok ? this.t('copied') : this.t('copyFailed');
      clearTimeout(button._labguideTimer);
      button._labguideTimer = setTimeout(() => { button.textContent = was; }, 2000);
    }

    /* A grade's answer: each check heading gets its step's tick or cross,
     * and the step's output in a closed <details>. null: back to "not graded". */
    setResults(grade) {
      this.results = grade || null;
      const steps = (grade && grade.steps) || [];
      const machines = this.opts.machines || [];
      for (const c of this.checks) {
        const st = grade ? findStep(steps, c.spec, machines) : null;
        if (!st) {
          c.mark.dataset.state = 'none';
          c.mark.textContent = '';
          c.state.textContent = this.t('notGraded') + ': ';
          c.box.hidden = true;
          c.box.open = false;
          c.heading.removeAttribute('data-passed');
          continue;
        }
        const v = st.passed ? this.t('passed') : this.t('failed');
        c.mark.dataset.state = st.passed ? 'pass' : 'fail';
        c.mark.textContent = st.passed ? '\u2713' : '\u2717';
        c.state.textContent = v + ': ';
        c.heading.setAttribute('data-passed', String(!!st.passed));
        const detail = st.timed_out ? this.t('timedOut')
          : (st.exit_code !== null && st.exit_code !== undefined) ? this.t('exit', { c: st.exit_code }) : '';
        c.box.querySelector('summary').textContent = this.t('result', { v }) + (detail ? ` (${detail})` : '');
        const out = c.box.querySelector('pre');
        out.textContent = st.output ? st.output : this.t('noOutput');
        out.setAttribute('aria-label', this.t('output', { name: c.spec }));
        c.box.hidden = false;
      }
    }

    destroy() {
      this.root.remove();
      this.checks = [];
    }
  }

  /* The lesson's guide from the API: the answer, or null when it has none
   * (404 no_guide). The browser revalidates with the ETag (304). */
  async function fetchGuide(lesson, lang) {
    const r = await fetch('/api/lessons/' + encodeURIComponent(lesson) + '/guide?lang=' + encodeURIComponent(lang || 'en'),
      { credentials: 'same-origin', cache: 'no-cache', headers: { Accept: 'application/json' } });
    if (r.status === 404) return null;
    if (!r.ok) throw new Error('GET guide: ' + r.status);
    return r.json();
  }

  window.LabGuide = {
    create: (host, opts) => new Guide(host, opts),
    fetch: fetchGuide,
    linkOk,
    texts: TEXTS,
  };
})();
