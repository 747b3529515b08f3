// Server-Sent Events over fetch(). EventSource cannot send an Authorization
// header, so the stream is read with fetch() and parsed here, following the
// WHATWG HTML "server-sent events" parsing rules: lines end in CRLF, LF or
// CR; "event", "data", "id" and "retry" fields; a line starting with ":" is
// a comment (studio's heartbeats); a blank line dispatches. On reconnect the
// last id seen goes back as the Last-Event-ID header, so the server sends
// only what was missed.

import {token} from './api.js';

// Unsupported: the server has no events route (404/405/501); the caller
// falls back to polling.
export class Unsupported extends Error {}

// parser returns a function that takes decoded text chunks and calls
// onEvent({type, data, id}) for each complete event.
export function parser(onEvent, onRetry) {
  let buf = '';
  let type = '';
  let data = [];
  let id = null;
  let sawCR = false;
  function line(l) {
    if (l === '') {
      if (data.length) onEvent({type: type || 'message', data: data.join('\n'), id});
      type = '';
      data = [];
      return;
    }
    if (l[0] === ':') return;
    const i = l.indexOf(':');
    const field = i < 0 ? l : l.slice(0, i);
    let value = i < 0 ? '' : l.slice(i + 1);
    if (value[0] === ' ') value = value.slice(1);
    if (field === 'event') type = value;
    else if (field === 'data') data.push(value);
    else if (field === 'id' && !value.includes('\0')) id = value;
    else if (field === 'retry' && /^\d+$/.test(value) && onRetry) onRetry(Number(value));
  }
  return (chunk) => {
    for (const ch of chunk) {
      if (ch === '\n') {
        if (sawCR) { sawCR = false; continue; }
        line(buf); buf = '';
      } else if (ch === '\r') {
        sawCR = true;
        line(buf); buf = '';
      } else {
        sawCR = false;
        buf += ch;
      }
    }
  };
}

// follow reads the stream at url until an event named `until` arrives, the
// signal aborts, or the server says it has no such stream. It reconnects
// after a dropped connection (backing off from 1 s to 15 s, or the server's
// retry), sending Last-Event-ID; a stream silent for idleMs (no event, no
// heartbeat) counts as dropped. onState(s) reports 'live' or
// 'reconnecting'.
export async function follow(url, {onEvent, onState = () => {}, signal, until = 'done', idleMs = 45000}) {
  let lastID = null;
  let delay = 1000;
  let retryMS = null;
  for (;;) {
    if (signal.aborted) return;
    const ctl = new AbortController();
    const stop = () => ctl.abort();
    signal.addEventListener('abort', stop, {once: true});
    let idle;
    const arm = () => { clearTimeout(idle); idle = setTimeout(() => ctl.abort(), idleMs); };
    let finished = false;
    try {
      const headers = {Accept: 'text/event-stream', Authorization: `Bearer ${token()}`};
      if (lastID !== null) headers['Last-Event-ID'] = lastID;
      arm();
      const res = await fetch(url, {headers, signal: ctl.signal, cache: 'no-store', credentials: 'omit'});
      if (res.status === 404 || res.status === 405 || res.status === 501) throw new Unsupported(`events: ${res.status}`);
      if (res.status === 401 || res.status === 403) throw new Unsupported(`events: ${res.status}`);
      if (!res.ok || !res.body || !(res.headers.get('Content-Type') || '').startsWith('text/event-stream')) {
        throw new Error(`events: ${res.status}`);
      }
      onState('live');
      delay = 1000;
      const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
      const feed = parser((ev) => {
        if (ev.id !== null) lastID = ev.id;
        onEvent(ev);
        if (ev.type === until) finished = true;
      }, (ms) => { retryMS = ms; });
      for (;;) {
        const {value, done} = await reader.read();
        if (done) break;
        arm();
        feed(value);
        if (finished) {
          ctl.abort();
          break;
        }
      }
    } catch (e) {
      if (e instanceof Unsupported) throw e;
      if (signal.aborted) return;
    } finally {
      clearTimeout(idle);
      signal.removeEventListener('abort', stop);
    }
    if (finished || signal.aborted) return;
    onState('reconnecting');
    await new Promise((resolve) => {
      const t = setTimeout(resolve, retryMS ?? delay);
      signal.addEventListener('abort', () => { clearTimeout(t); resolve(); }, {once: true});
    });
    delay = Math.min(delay * 2, 15000);
  }
}
