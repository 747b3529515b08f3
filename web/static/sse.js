// Server-Sent Events over fetch(). EventSource cannot send an Authorization
// header, so the stream is read with fetch() and parsed here, following the
// WHATWG HTML "server-sent events" parsing rules: lines end in CRLF, LF or
// CR; "event", "data", "id" and "retry" fields; a line starting with ":" is
// a comment (studio's heartbeats); a blank line dispatches. On reconnect the
// last id seen goes back as the Last-Event-ID header, so the server sends
// only what was missed.

import {sleep, token} from './api.js';

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
// heartbeat) counts as dropped. onState(s, why) reports 'live', or
// 'reconnecting' with why the connection was lost.
export async function follow(url, {onEvent, onState = () => {}, signal, until = 'done', idleMs = 45000}) {
  let lastID = null;
  let delay = 1000;
  let retryMS = null;
  while (!signal.aborted) {
    // The watchdog aborts the connection when nothing arrived for idleMs.
    // It restarts with every chunk, which AbortSignal.timeout cannot do.
    const idle = new AbortController();
    let watchdog;
    const arm = () => {
      clearTimeout(watchdog);
      watchdog = setTimeout(() => idle.abort(new Error(`nothing arrived for ${idleMs / 1000} s`)), idleMs);
    };
    let finished = false;
    let why = 'the server ended the stream';
    try {
      const headers = {Accept: 'text/event-stream', Authorization: `Bearer ${token()}`};
      if (lastID !== null) headers['Last-Event-ID'] = lastID;
      arm();
      const res = await fetch(url, {headers, signal: AbortSignal.any([signal, idle.signal]), cache: 'no-store', credentials: 'omit'});
      if (res.status === 404 || res.status === 405 || res.status === 501) throw new Unsupported(`events: ${res.status}`);
      if (res.status === 401 || res.status === 403) throw new Unsupported(`events: ${res.status}`);
      if (!res.ok || !res.body || !(res.headers.get('Content-Type') || '').startsWith('text/event-stream')) {
        throw new Error(`the server answered ${res.status} ${res.headers.get('Content-Type') || ''}`.trim());
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
          await reader.cancel();
          return;
        }
      }
    } catch (err) {
      if (err instanceof Unsupported) throw err;
      if (signal.aborted) return;
      // fetch and the reader fail with the browser's words ("Failed to
      // fetch", "network error"): a TypeError. Say it for people.
      if (idle.signal.aborted) why = idle.signal.reason.message;
      else if (err instanceof TypeError) why = navigator.onLine ? 'the connection was lost' : 'the browser is offline';
      else why = err.message;
    } finally {
      clearTimeout(watchdog);
    }
    onState('reconnecting', why);
    await sleep(retryMS ?? delay, signal);
    delay = Math.min(delay * 2, 15000);
  }
}
