// One batch: live progress from GET /v1/batches/{id}/events (read with
// fetch, see sse.js; polling when the server has no stream), a grid of
// thumbnails grouped by set and frame with the candidates side by side,
// failed tasks with their errors, cancel, and publishing picked images.
//
// Every task has its cell, with its final size, from the start: an image
// arriving fills its cell and moves nothing. Asset bytes need the bearer
// token, so thumbnails are fetched with it and shown as blob: URLs (the
// page's CSP allows img-src blob:), revoked when the page is left.

import {api, ApiError, listAll, LostAnswer, newRequestID, token} from './api.js';
import {failureView, h, problemView, replace, stateBadge, when} from './dom.js';
import {follow, Unsupported} from './sse.js';

const TERMINAL = new Set(['succeeded', 'failed', 'canceled']);

export async function batchView(main, id, cat, signal) {
  const flash = sessionStorage.getItem('studio.flash');
  sessionStorage.removeItem('studio.flash');
  const path = `/v1/batches/${encodeURIComponent(id)}`;
  let batch = (await api(path, {signal})).data;
  const first = await listAll(`${path}/tasks`, {signal});
  if (signal.aborted) return;

  const tasks = new Map(); // task id -> task
  const cells = new Map(); // task id -> {btn, thumb, cap, img}
  const selected = new Set(); // task ids picked for publishing
  const urls = []; // blob: URLs to revoke
  signal.addEventListener('abort', () => urls.forEach((u) => URL.revokeObjectURL(u)));

  // The header: state, progress, counts, cancel.
  const title = h('h1', {}, 'Batch');
  const badge = h('span');
  const bar = h('progress', {id: 'progress', max: '1', value: '0', 'aria-label': 'Tasks ended'});
  const stats = h('div', {class: 'stats', id: 'stats', 'aria-live': 'polite'});
  const live = h('span', {class: 'muted', id: 'live'});
  const cancel = h('button', {type: 'button', class: 'danger', id: 'cancel'}, 'Cancel batch');
  const cancelOut = h('div');
  const failedBox = h('div', {id: 'failed'});
  const grid = h('div', {id: 'grid'});

  function header() {
    const c = batch.counts;
    const ended = c.succeeded + c.failed + c.canceled;
    bar.max = batch.task_count || 1;
    bar.value = ended;
    replace(badge, stateBadge(batch.state));
    badge.id = 'batch-state';
    badge.dataset.state = batch.state;
    replace(stats,
      h('span', {id: 'done-count', 'data-ended': String(ended), 'data-total': String(batch.task_count)}, h('strong', {}, `${ended} / ${batch.task_count}`), ' ended'),
      h('span', {}, `${c.queued} queued`), h('span', {}, `${c.running} running`),
      h('span', {}, `${c.succeeded} succeeded`), h('span', {}, `${c.failed} failed`), h('span', {}, `${c.canceled} canceled`));
    cancel.disabled = TERMINAL.has(batch.state);
  }

  cancel.addEventListener('click', async () => {
    cancel.disabled = true;
    try {
      batch = (await api(`${path}/cancel`, {method: 'POST', signal})).data;
      header();
      replace(cancelOut);
    } catch (err) {
      if (signal.aborted) return;
      // Cancel is idempotent: after a lost answer, pressing again is safe.
      replace(cancelOut, err instanceof ApiError ? problemView(err) :
        h('div', {class: 'notice warn', role: 'alert'}, h('p', {}, `No answer to the cancel: ${err.reason || err.message}. Cancel again is safe.`)));
      cancel.disabled = false;
    }
  });

  // The grid, in plan order: set, frame, then generator and candidate side
  // by side.
  function buildGrid(list) {
    const sets = new Map();
    for (const t of list) {
      if (!sets.has(t.collection)) sets.set(t.collection, new Map());
      const frames = sets.get(t.collection);
      if (!frames.has(t.frame)) frames.set(t.frame, []);
      frames.get(t.frame).push(t);
    }
    replace(grid, [...sets].map(([collection, frames]) => h('section', {class: 'panel', 'data-collection': collection},
      h('h2', {}, collection),
      [...frames].map(([frame, ts]) => h('div', {class: 'frame', 'data-frame': frame},
        h('div', {class: 'frame-label'}, frame),
        h('div', {class: 'cells'}, ts.map(cellFor)))))));
  }

  function cellFor(t) {
    const thumb = h('span', {class: 'thumb'});
    const cap = h('span', {class: 'cap'});
    const btn = h('button', {type: 'button', class: 'cell', disabled: true, 'data-task': t.id,
      onclick: () => {
        if (selected.has(t.id)) selected.delete(t.id);
        else selected.add(t.id);
        btn.setAttribute('aria-pressed', String(selected.has(t.id)));
        pickLine();
      }}, thumb, cap);
    cells.set(t.id, {btn, thumb, cap, img: null});
    return btn;
  }

  // older says whether task version a is older than b: by updated_at (as
  // times: the text's fraction digits vary), then, within one instant, an
  // ended state beats a running one beats a queued one.
  const rank = {queued: 0, running: 1, succeeded: 2, failed: 2, canceled: 2};
  function older(a, b) {
    const ta = Date.parse(a.updated_at);
    const tb = Date.parse(b.updated_at);
    return ta < tb || (ta === tb && rank[a.state] < rank[b.state]);
  }

  function apply(t) {
    const old = tasks.get(t.id);
    if (old && older(t, old)) return;
    tasks.set(t.id, t);
    const c = cells.get(t.id);
    if (!c) return; // not in the grid yet; the next full read places it
    const label = `${t.generator} #${t.candidate}`;
    c.btn.dataset.state = t.state;
    c.btn.classList.toggle('failed', t.state === 'failed');
    replace(c.cap, h('span', {}, label), h('span', {class: 'muted'}, t.state === 'succeeded' ? '' : t.state));
    const name = `${t.collection} ${t.frame}, ${t.generator} candidate ${t.candidate}`;
    c.btn.setAttribute('aria-label', `${name}: ${t.state}`);
    if (t.state === 'succeeded' && t.asset_id) {
      c.btn.disabled = false;
      c.btn.setAttribute('aria-pressed', String(selected.has(t.id)));
      if (!c.img) {
        c.img = h('img', {alt: name, decoding: 'async'});
        c.thumb.append(c.img);
        loadThumb(t.asset_id, c.img);
      }
    } else {
      c.btn.disabled = true;
      c.btn.removeAttribute('aria-pressed');
      if (t.state === 'failed' && !c.thumb.querySelector('.why')) c.thumb.append(h('span', {class: 'why'}, t.error || 'failed'));
    }
    scheduleFailed();
  }

  // Thumbnails: fetched with the token, four at a time.
  const queue = [];
  let loading = 0;
  function loadThumb(assetID, img) {
    queue.push({assetID, img});
    pump();
  }
  function pump() {
    while (loading < 4 && queue.length && !signal.aborted) {
      const {assetID, img} = queue.shift();
      loading++;
      fetchThumb(assetID, img).finally(() => { loading--; pump(); });
    }
  }
  async function fetchThumb(assetID, img, tries = 0) {
    try {
      // redirect=false: the bytes come through studio even when it answers
      // others with a presigned redirect, which a browser would follow only
      // where the bucket's CORS rules allow this origin.
      const res = await fetch(`/v1/assets/${encodeURIComponent(assetID)}/content?redirect=false`,
        {headers: {Authorization: `Bearer ${token()}`}, signal, credentials: 'omit'});
      if (!res.ok) throw new Error(`HTTP ${res.status}`);
      const url = URL.createObjectURL(await res.blob());
      urls.push(url);
      img.src = url;
      img.dataset.loaded = 'true';
    } catch (err) {
      if (signal.aborted) return;
      if (tries < 3) {
        await new Promise((r) => setTimeout(r, 1000 * (tries + 1)));
        return fetchThumb(assetID, img, tries + 1);
      }
      img.alt = `${img.alt} (could not load: ${err.message})`;
    }
  }

  // Failed tasks, with their errors, redrawn at most once a frame.
  let failedPending = false;
  function scheduleFailed() {
    if (failedPending) return;
    failedPending = true;
    requestAnimationFrame(() => {
      failedPending = false;
      const failed = [...tasks.values()].filter((t) => t.state === 'failed');
      replace(failedBox, failed.length ? h('section', {class: 'panel'},
        h('h2', {}, `Failed tasks (${failed.length})`),
        h('ul', {class: 'failed-list'}, failed.map((t) => h('li', {'data-task': t.id},
          h('strong', {}, `${t.collection} / ${t.frame} / ${t.generator} #${t.candidate}`),
          `: ${t.error || 'no error recorded'} (${t.attempts} ${t.attempts === 1 ? 'attempt' : 'attempts'})`)))) : null);
    });
  }

  // Publishing picked images.
  const channel = h('select', {id: 'channel', 'aria-label': 'Channel'}, (cat.channels.length ? cat.channels : ['gallery']).map((c) => h('option', {value: c}, c)));
  const publish = h('button', {type: 'button', class: 'primary', id: 'publish', disabled: true}, 'Publish');
  const pickInfo = h('span', {id: 'picked'});
  const pubOut = h('div', {'aria-live': 'polite'});
  const pubList = h('ul', {class: 'pubs', id: 'publications'});
  const pubKey = `studio.pub.${batch.id}`;

  function pickLine() {
    const n = selected.size;
    pickInfo.textContent = n ? `${n} ${n === 1 ? 'image' : 'images'} picked` : 'Pick images by pressing them.';
    publish.disabled = n === 0;
    publish.textContent = n ? `Publish ${n} to ${channel.value}` : 'Publish';
  }
  channel.addEventListener('change', pickLine);

  function pickedAssets() {
    return [...selected].map((tid) => tasks.get(tid)?.asset_id).filter(Boolean);
  }

  publish.addEventListener('click', async () => {
    const assets = pickedAssets();
    const key = JSON.stringify({assets, channel: channel.value});
    // Like a generation: one id per frozen publication, the same id again
    // after a lost answer, a new one when the pick or channel changed.
    let pend = null;
    try { pend = JSON.parse(sessionStorage.getItem(pubKey) || 'null'); } catch { pend = null; }
    if (!pend || pend.key !== key) {
      const id = newRequestID();
      pend = {key, text: JSON.stringify({request_id: id, batch_id: batch.id, asset_ids: assets, channel: channel.value}), id};
    }
    sessionStorage.setItem(pubKey, JSON.stringify(pend));
    publish.disabled = true;
    replace(pubOut, h('p', {class: 'muted'}, `Publishing (request ${pend.id})…`));
    try {
      const res = await api('/v1/publications', {method: 'POST', body: pend.text, timeoutMs: 30000, signal});
      sessionStorage.removeItem(pubKey);
      replace(pubOut);
      pickLine();
      watchPublication(res.data);
    } catch (err) {
      if (signal.aborted) return;
      if (err instanceof LostAnswer) {
        replace(pubOut, h('div', {class: 'notice warn', role: 'alert'},
          h('p', {}, h('strong', {}, 'The answer was lost'), `: ${err.reason}.`),
          h('p', {}, `Publish again sends the same request id (${pend.id}): it can never publish twice.`)));
        publish.textContent = 'Publish again';
      } else if (err instanceof ApiError) {
        sessionStorage.removeItem(pubKey);
        replace(pubOut, problemView(err, 'studio refused the publication.'));
        pickLine();
      }
      publish.disabled = selected.size === 0;
    }
  });

  const watching = new Map(); // publication id -> li
  async function watchPublication(p) {
    let li = watching.get(p.id);
    if (!li) {
      li = h('li', {'data-publication': p.id});
      watching.set(p.id, li);
      pubList.prepend(li);
    }
    for (;;) {
      const c = p.counts;
      const ended = c.succeeded + c.failed + c.canceled;
      replace(li, stateBadge(p.state), ` ${p.channel}: ${ended} / ${p.item_count} items done`,
        c.failed ? `, ${c.failed} failed` : '', h('span', {class: 'muted'}, ` · ${when(p.created_at)}`));
      if (TERMINAL.has(p.state) || signal.aborted) return;
      await new Promise((r) => setTimeout(r, 1000));
      if (signal.aborted) return;
      try {
        p = (await api(`/v1/publications/${encodeURIComponent(p.id)}`, {signal})).data;
      } catch (err) {
        if (signal.aborted || (err instanceof ApiError && err.status !== 503)) return;
      }
    }
  }

  // The page.
  const selectAll = h('button', {type: 'button', id: 'pick-all', onclick: () => {
    for (const [tid, t] of tasks) {
      if (t.state === 'succeeded' && t.asset_id) {
        selected.add(tid);
        cells.get(tid)?.btn.setAttribute('aria-pressed', 'true');
      }
    }
    pickLine();
  }}, 'Pick all');
  const clearPick = h('button', {type: 'button', id: 'pick-none', onclick: () => {
    for (const tid of selected) cells.get(tid)?.btn.setAttribute('aria-pressed', 'false');
    selected.clear();
    pickLine();
  }}, 'Clear');

  replace(main,
    flash ? h('div', {class: 'notice ok', role: 'status', id: 'flash'}, h('p', {}, flash)) : null,
    title,
    h('div', {class: 'panel'},
      h('p', {}, badge, ' ', h('strong', {id: 'prompt'}, batch.prompt)),
      bar,
      stats,
      h('p', {class: 'muted'}, `Request ${batch.request_id} · created ${when(batch.created_at)} · `, live),
      h('div', {class: 'actions'}, cancel, h('a', {href: '#/batches'}, 'All batches')),
      cancelOut),
    h('section', {class: 'panel', 'aria-labelledby': 'pub-h'},
      h('h2', {id: 'pub-h'}, 'Publish'),
      h('div', {class: 'actions'}, pickInfo, selectAll, clearPick, channel, publish),
      pubOut, pubList),
    failedBox,
    grid);
  header();
  buildGrid(first);
  first.forEach(apply);
  pickLine();

  // Earlier publications of this batch, where the server lists them: the
  // actor's, newest first, down to the batch's own time (ids are drawn in
  // time order, and a publication comes after its batch).
  (async () => {
    for (let cursor = null; ;) {
      const q = cursor ? `&cursor=${encodeURIComponent(cursor)}` : '';
      const {data} = await api(`/v1/publications?limit=100${q}`, {signal});
      const items = data.items || [];
      for (const p of items) if (p.batch_id === batch.id && !watching.has(p.id)) watchPublication(p);
      if (!data.next_cursor || !items.length || items[items.length - 1].id < batch.id) return;
      cursor = data.next_cursor;
    }
  })().catch((err) => {
    if (!signal.aborted) pubList.before(failureView(err, 'Earlier publications could not be listed.'));
  });

  if (TERMINAL.has(batch.state)) {
    live.textContent = 'ended';
    return;
  }

  async function reread() {
    const list = await listAll(`${path}/tasks`, {signal});
    if (list.some((t) => !cells.has(t.id))) buildGrid(list); // cannot happen: a batch's tasks are fixed
    list.forEach(apply);
  }

  let connected = false;
  try {
    await follow(`${path}/events`, {
      signal,
      onState: (s) => {
        live.textContent = s === 'live' ? 'live' : 'reconnecting…';
        live.dataset.state = s;
        if (s === 'live') live.dataset.streamed = 'true';
      },
      onEvent: (ev) => {
        let data;
        try { data = JSON.parse(ev.data); } catch { return; }
        if (ev.type === 'batch' || ev.type === 'done') {
          batch = data;
          header();
          if (!connected) {
            // What changed between the first read and the stream's start.
            connected = true;
            reread().catch((err) => {
              if (!signal.aborted) grid.before(failureView(err, 'The tasks could not be read again; the live updates go on.'));
            });
          }
        } else if (ev.type === 'task') {
          apply(data);
        }
      },
    });
    if (signal.aborted) return;
    live.textContent = 'ended';
    await reread();
  } catch (err) {
    if (!(err instanceof Unsupported) || signal.aborted) return;
    live.textContent = 'polling';
    live.dataset.state = 'polling';
    await poll();
  }

  // Without an events stream: the batch every 1.5 s, its tasks when the
  // counts moved.
  async function poll() {
    let seen = JSON.stringify(batch.counts);
    while (!signal.aborted && !TERMINAL.has(batch.state)) {
      await new Promise((r) => setTimeout(r, 1500));
      if (signal.aborted) return;
      try {
        batch = (await api(path, {signal})).data;
        header();
        const now = JSON.stringify(batch.counts);
        if (now !== seen) {
          seen = now;
          await reread();
        }
      } catch (err) {
        if (signal.aborted || (err instanceof ApiError && err.status === 401)) return;
      }
    }
    if (!signal.aborted) {
      live.textContent = 'ended';
      await reread();
    }
  }
}
