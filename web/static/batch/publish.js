// The batch page's Publish panel: the pick, the channel, Publish (an
// intent like a generation: one request id per frozen publication, sent
// again unchanged after a lost answer), and the publications of the batch
// with their progress.

import {api, ApiError, LostAnswer, newRequestID, sleep, store, stored} from '../api.js';
import {failureView, h, problemView, replace, stateBadge, when} from '../dom.js';
import {TERMINAL} from './state.js';

// publishPanel shows the pick of state and publishes it to a channel of
// cat.
export function publishPanel(state, cat, signal) {
  const batchID = state.batch.id;
  const channel = h('select', {id: 'channel', 'aria-label': 'Channel'}, (cat.channels.length ? cat.channels : ['gallery']).map((c) => h('option', {value: c}, c)));
  const publish = h('button', {type: 'button', class: 'primary', id: 'publish', disabled: true}, 'Publish');
  const pickInfo = h('span', {id: 'picked'});
  const out = h('div', {'aria-live': 'polite'});
  const list = h('ul', {class: 'pubs', id: 'publications'});
  const pendingKey = `studio.pub.${batchID}`;

  function pickLine() {
    const n = state.picked.size;
    pickInfo.textContent = n ? `${n} ${n === 1 ? 'image' : 'images'} picked` : 'Pick images by pressing them.';
    publish.disabled = n === 0;
    publish.textContent = n ? `Publish ${n} to ${channel.value}` : 'Publish';
  }
  channel.addEventListener('change', pickLine);
  state.subscribe((what) => {
    if (what === 'picked') pickLine();
  });

  publish.addEventListener('click', async () => {
    const assets = state.pickedAssets();
    const key = JSON.stringify({assets, channel: channel.value});
    // Like a generation: one id per frozen publication, the same id again
    // after a lost answer, a new one when the pick or channel changed.
    let pend = stored(pendingKey);
    if (!pend || pend.key !== key) {
      const id = newRequestID();
      pend = {key, text: JSON.stringify({request_id: id, batch_id: batchID, asset_ids: assets, channel: channel.value}), id};
    }
    store(pendingKey, pend);
    publish.disabled = true;
    replace(out, h('p', {class: 'muted'}, `Publishing (request ${pend.id})…`));
    try {
      const res = await api('/v1/publications', {method: 'POST', body: pend.text, timeoutMs: 30000, signal});
      store(pendingKey, null);
      replace(out);
      pickLine();
      watch(res.data);
    } catch (err) {
      if (signal.aborted) return;
      if (err instanceof LostAnswer) {
        replace(out, h('div', {class: 'notice warn', role: 'alert'},
          h('p', {}, h('strong', {}, 'The answer was lost'), `: ${err.reason}.`),
          h('p', {}, `Publish again sends the same request id (${pend.id}): it can never publish twice.`)));
        publish.textContent = 'Publish again';
      } else if (err instanceof ApiError) {
        store(pendingKey, null);
        replace(out, problemView(err, 'studio refused the publication.'));
        pickLine();
      } else {
        replace(out, failureView(err, 'The publication could not be sent.'));
      }
      publish.disabled = state.picked.size === 0;
    }
  });

  // watch shows a publication's progress, read every second until it
  // ends. A lost answer or a 503 is retried (and said); any other failure
  // stops the watch and is shown.
  const watching = new Map(); // publication id -> li
  async function watch(p) {
    let li = watching.get(p.id);
    if (!li) {
      li = h('li', {'data-publication': p.id});
      watching.set(p.id, li);
      list.prepend(li);
    }
    let note = ''; // why the last read failed
    let stopped = false;
    for (;;) {
      const c = p.counts;
      const ended = c.succeeded + c.failed + c.canceled;
      replace(li, stateBadge(p.state), ` ${p.channel}: ${ended} / ${p.item_count} items done`,
        c.failed ? `, ${c.failed} failed` : '', h('span', {class: 'muted'}, ` · ${when(p.created_at)}`),
        note ? h('span', {class: 'muted', role: 'status'}, ` · ${note}`) : null);
      if (TERMINAL.has(p.state) || signal.aborted || stopped) return;
      await sleep(1000, signal);
      if (signal.aborted) return;
      try {
        p = (await api(`/v1/publications/${encodeURIComponent(p.id)}`, {signal})).data;
        note = '';
      } catch (err) {
        if (signal.aborted) return;
        stopped = !(err instanceof LostAnswer || (err instanceof ApiError && err.status === 503));
        note = stopped ? `no longer followed: ${err.message}` : `no answer (${err.message}); trying again`;
      }
    }
  }

  // Earlier publications of this batch, where the server lists them: the
  // actor's, newest first, down to the batch's own time (ids are drawn in
  // time order, and a publication comes after its batch).
  (async () => {
    for (let cursor = null; ;) {
      const q = cursor ? `&cursor=${encodeURIComponent(cursor)}` : '';
      const {data} = await api(`/v1/publications?limit=100${q}`, {signal});
      const items = data.items || [];
      for (const p of items) if (p.batch_id === batchID && !watching.has(p.id)) watch(p);
      if (!data.next_cursor || !items.length || items[items.length - 1].id < batchID) return;
      cursor = data.next_cursor;
    }
  })().catch((err) => {
    if (!signal.aborted) list.before(failureView(err, 'Earlier publications could not be listed.'));
  });

  const pickAll = h('button', {type: 'button', id: 'pick-all', onclick: () => state.pickAll()}, 'Pick all');
  const clear = h('button', {type: 'button', id: 'pick-none', onclick: () => state.clearPicks()}, 'Clear');
  pickLine();
  return h('section', {class: 'panel', 'aria-labelledby': 'pub-h'},
    h('h2', {id: 'pub-h'}, 'Publish'),
    h('div', {class: 'actions'}, pickInfo, pickAll, clear, channel, publish),
    out, list);
}
