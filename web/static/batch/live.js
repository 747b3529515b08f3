// The batch page's live updates: GET /v1/batches/{id}/events read with
// fetch (see sse.js), or, where the server has no stream, polling. They
// go into the state; the views follow it.

import {api, listAll, sleep} from '../api.js';
import {failureView, h, replace} from '../dom.js';
import {follow, Unsupported} from '../sse.js';
import {TERMINAL} from './state.js';

const POLL_MS = 1500;

// liveView keeps state up to date until the batch ends or signal aborts.
// It returns the status line ('live', 'reconnecting…', 'polling' or
// 'ended') and the place where failures are shown.
export function liveView(state, path, signal) {
  const status = h('span', {class: 'muted', id: 'live'});
  const problems = h('div', {id: 'live-problems', 'aria-live': 'polite'});
  const show = (s, text = s) => {
    status.textContent = text;
    status.dataset.state = s;
  };
  const report = (lead) => (err) => {
    if (!signal.aborted) replace(problems, failureView(err, lead));
  };

  async function reread() {
    for (const t of await listAll(`${path}/tasks`, {signal})) state.putTask(t);
  }

  async function stream() {
    let synced = false;
    await follow(`${path}/events`, {
      signal,
      onState: (s, why) => {
        if (s === 'live') status.dataset.streamed = 'true';
        show(s, s === 'live' ? 'live' : `reconnecting… (${why})`);
      },
      onEvent: (ev) => {
        let data;
        try {
          data = JSON.parse(ev.data);
        } catch (err) {
          // The stream cannot be trusted to be whole: read the tasks again.
          // The parser's words (SyntaxError: Unexpected token ...) say
          // nothing to a person.
          console.warn(`events: ${ev.type} event not JSON (${err.message})`);
          report('An update could not be read; the tasks are read again.')(new Error('The update was not valid JSON.'));
          reread().catch(report('The tasks could not be read again; the live updates go on.'));
          return;
        }
        if (ev.type === 'batch' || ev.type === 'done') {
          state.setBatch(data);
          if (!synced) {
            // What changed between the first read and the stream's start.
            synced = true;
            reread().catch(report('The tasks could not be read again; the live updates go on.'));
          }
        } else if (ev.type === 'task') {
          state.putTask(data);
        }
      },
    });
  }

  // Without an events stream: the batch every POLL_MS, its tasks when the
  // counts moved. A failed read is shown and tried again.
  async function poll() {
    show('polling');
    let seen = JSON.stringify(state.batch.counts);
    while (!TERMINAL.has(state.batch.state)) {
      await sleep(POLL_MS, signal);
      if (signal.aborted) return;
      try {
        state.setBatch((await api(path, {signal})).data);
        const now = JSON.stringify(state.batch.counts);
        if (now !== seen) {
          await reread();
          seen = now;
        }
        replace(problems);
      } catch (err) {
        report('The batch could not be read; trying again.')(err);
      }
    }
  }

  (async () => {
    if (TERMINAL.has(state.batch.state)) {
      show('ended');
      return;
    }
    try {
      await stream();
    } catch (err) {
      if (!(err instanceof Unsupported)) throw err;
      await poll();
    }
    if (signal.aborted) return;
    show('ended');
    await reread();
  })().catch(report('The batch could not be followed.'));

  return {status, problems};
}
