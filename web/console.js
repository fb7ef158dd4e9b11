/* labvm student page: one terminal on the console bridge (window.labvm.Console).
 *
 * An xterm.js terminal in a box, on a WebSocket to labvm-console. Every
 * (re)connect asks for a new single-use ticket (POST
 * /api/sessions/{id}/console-ticket). When the connection drops it
 * reconnects by itself with exponential backoff (about 1, 2, 4, 8, 16, then
 * 30 s, with jitter; back to 1 s after a connection stayed up 10 s); close
 * code 4410 (session ended) stops that. The terminal fills its box (fit
 * addon) and tells the other end its size: a text message
 * {"type":"resize","cols","rows"} on the WebSocket (a Pod's exec stream has
 * a resize channel) and, for a VM, whose serial line has no size of its own,
 * POST /api/sessions/{id}/tty-size (the guest agent sets it on the console
 * tty). Esc then Tab leaves the terminal; Tab alone is the shell's.
 *
 *   new Console(sid, container, runtime, machine, hooks)
 *     machine: null for the session's only machine
 *     hooks.shown(c)         is c the terminal on screen (its state shows in #conn)
 *     hooks.sessionChanged() the session may have changed (ended, not ready): look
 *   c.type(text)    text typed in, as keystrokes (the guide's Run in terminal);
 *                   kept until the connection is open when it is not yet
 *   c.fit(), c.reconnectNow(), c.render(), c.stop()
 *
 * Loaded by app.js with the lab (window.labvm.Console).
 */
'use strict';

(function () {
  const L = window.labvm;
  if (L.Console) return;
  const { $, t, api, sessionPath } = L;
  const CONSOLE_PROTO = 'labvm-console.v1';
  const OPEN_TIMEOUT_MS = 20000;   // ticket -> status "open"
  const STABLE_MS = 10000;         // a connection up this long resets the backoff
  const BACKOFF_MAX_MS = 30000;
  const ESC_HOLD_MS = 1000;        // Esc, then Tab within this: leave the terminal
  const MAX_COLS = 500;
  const TTY_SIZE_DELAY_MS = 300;   // a VM's size goes to the API once resizing settles

  class Console {
    constructor(sid, container, runtime, machine, hooks) {
      this.sid = sid;
      this.hooks = hooks || {};
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
      this.pending = '';        // typed by the guide while not connected: sent at open
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

    shown() { return typeof this.hooks.shown === 'function' && this.hooks.shown(this); }

    sessionChanged() { if (typeof this.hooks.sessionChanged === 'function') this.hooks.sessionChanged(); }

    /* Text typed in as keystrokes: through xterm.js's input, the path of the
     * student's own keys (onData -> the WebSocket), so the guest echoes it
     * as if typed. Before the connection is open it waits for it; a session
     * that ended drops it. */
    type(text) {
      if (this.stopped || !text) return;
      if (this.ws && this.open && this.ws.readyState === WebSocket.OPEN) this.term.input(text, true);
      else this.pending += text;
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
      // (or the whole terminal box, while the guide's tab is shown on a phone)
      if (this.stopped || !this.term.element || this.container.hidden || !this.container.offsetWidth) return;
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
      if (st !== was && this.shown()) {
        L.announce('conn-live', st === 'open' ? t('console.open') : st === 'connecting' ? t('console.connecting')
          : st === 'ended' ? t('console.ended') : t('console.retryingNow'));
      }
    }

    render() {
      if (!this.shown()) return;
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
        if (r.status === 409 || r.status === 404) this.sessionChanged();
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
          if (this.pending) {
            const p = this.pending;
            this.pending = '';
            this.term.input(p, true);
          }
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
          this.pending = '';
          this.setState('ended');
          this.sessionChanged();
          return;
        }
        if (code === 4409 || code === 4403) this.sessionChanged();
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

  L.Console = Console;
}());
