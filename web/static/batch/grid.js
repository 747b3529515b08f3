// The batch page's grid: one section per set, one row per frame, the
// generators' candidates side by side, and the list of failed tasks.
//
// Every task has its cell, with its final size, from the start: an image
// arriving fills its cell and moves nothing. Asset bytes need the bearer
// token, so thumbnails are fetched with it and shown as blob: URLs (the
// page's CSP allows img-src blob:), revoked when the page is left. A cell
// is a button: pressing it picks its image for publishing.

import {sleep, token} from '../api.js';
import {h, replace} from '../dom.js';

const THUMB_TIMEOUT_MS = 20000;

// gridView shows state's tasks and follows their changes. It returns the
// failed-task list and the grid, to place on the page.
export function gridView(state, signal) {
  const grid = h('div', {id: 'grid'});
  const failedBox = h('div', {id: 'failed'});
  const cells = new Map(); // task id -> {btn, thumb, cap, img}
  const urls = []; // blob: URLs to revoke
  signal.addEventListener('abort', () => urls.forEach((u) => URL.revokeObjectURL(u)));

  // build lays out every task's cell, in plan order.
  function build() {
    cells.clear();
    const sets = new Map();
    for (const t of state.tasks.values()) {
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
    state.tasks.forEach(render);
    scheduleFailed();
  }

  function cellFor(t) {
    const thumb = h('span', {class: 'thumb'});
    const cap = h('span', {class: 'cap'});
    const btn = h('button', {type: 'button', class: 'cell', disabled: true, 'data-task': t.id,
      onclick: () => state.toggle(t.id)}, thumb, cap);
    cells.set(t.id, {btn, thumb, cap, img: null});
    return btn;
  }

  // render shows one task in its cell.
  function render(t) {
    const c = cells.get(t.id);
    const name = `${t.collection} ${t.frame}, ${t.generator} candidate ${t.candidate}`;
    c.btn.dataset.state = t.state;
    c.btn.classList.toggle('failed', t.state === 'failed');
    replace(c.cap, h('span', {}, `${t.generator} #${t.candidate}`), h('span', {class: 'muted'}, t.state === 'succeeded' ? '' : t.state));
    c.btn.setAttribute('aria-label', `${name}: ${t.state}`);
    if (state.pickable(t.id)) {
      c.btn.disabled = false;
      c.btn.setAttribute('aria-pressed', String(state.picked.has(t.id)));
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
  }

  // Thumbnails: fetched with the token, four at a time, each try given
  // THUMB_TIMEOUT_MS, three retries.
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
  async function fetchThumb(assetID, img) {
    for (let tries = 0; ; tries++) {
      try {
        // redirect=false: the bytes come through studio even when it
        // answers others with a presigned redirect, which a browser would
        // follow only where the bucket's CORS rules allow this origin.
        const res = await fetch(`/v1/assets/${encodeURIComponent(assetID)}/content?redirect=false`,
          {headers: {Authorization: `Bearer ${token()}`}, credentials: 'omit',
            signal: AbortSignal.any([signal, AbortSignal.timeout(THUMB_TIMEOUT_MS)])});
        if (!res.ok) throw new Error(`HTTP ${res.status}`);
        const url = URL.createObjectURL(await res.blob());
        urls.push(url);
        img.src = url;
        img.dataset.loaded = 'true';
        return;
      } catch (err) {
        if (signal.aborted) return;
        if (tries === 3) {
          const why = err.name === 'TimeoutError' ? `no answer within ${THUMB_TIMEOUT_MS / 1000} s` : err.message;
          img.alt = `${img.alt} (could not load: ${why})`;
          return;
        }
        await sleep(1000 * (tries + 1), signal);
      }
    }
  }

  // Failed tasks, with their errors, redrawn at most once a frame.
  let failedPending = false;
  function scheduleFailed() {
    if (failedPending) return;
    failedPending = true;
    requestAnimationFrame(() => {
      failedPending = false;
      const failed = [...state.tasks.values()].filter((t) => t.state === 'failed');
      replace(failedBox, failed.length ? h('section', {class: 'panel'},
        h('h2', {}, `Failed tasks (${failed.length})`),
        h('ul', {class: 'failed-list'}, failed.map((t) => h('li', {'data-task': t.id},
          h('strong', {}, `${t.collection} / ${t.frame} / ${t.generator} #${t.candidate}`),
          `: ${t.error || 'no error recorded'} (${t.attempts} ${t.attempts === 1 ? 'attempt' : 'attempts'})`)))) : null);
    });
  }

  state.subscribe((what, t) => {
    if (what === 'task') {
      // A batch's tasks are fixed, so a task without a cell does not
      // come; if one did, the grid is laid out again.
      if (cells.has(t.id)) {
        render(t);
        scheduleFailed();
      } else {
        build();
      }
    } else if (what === 'picked') {
      for (const [id, c] of cells) if (!c.btn.disabled) c.btn.setAttribute('aria-pressed', String(state.picked.has(id)));
    }
  });
  build();
  return {failed: failedBox, grid};
}
