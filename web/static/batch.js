// One batch: its header (state, progress, Cancel), the Publish panel, the
// failed tasks and the grid of thumbnails, all views of one state
// (batch/state.js) that the live updates (batch/live.js) keep current.

import {api, listAll} from './api.js';
import {h, replace} from './dom.js';
import {gridView} from './batch/grid.js';
import {headerPanel} from './batch/header.js';
import {liveView} from './batch/live.js';
import {publishPanel} from './batch/publish.js';
import {batchState} from './batch/state.js';

export async function batchView(main, id, cat, signal) {
  const flash = sessionStorage.getItem('studio.flash');
  sessionStorage.removeItem('studio.flash');
  const path = `/v1/batches/${encodeURIComponent(id)}`;
  const batch = (await api(path, {signal})).data;
  const tasks = await listAll(`${path}/tasks`, {signal});
  if (signal.aborted) return;

  const state = batchState(batch, tasks);
  const grid = gridView(state, signal);
  const live = liveView(state, path, signal);
  replace(main,
    flash ? h('div', {class: 'notice ok', role: 'status', id: 'flash'}, h('p', {}, flash)) : null,
    h('h1', {}, 'Batch'),
    headerPanel(state, path, live.status, signal),
    publishPanel(state, cat, signal),
    live.problems,
    grid.failed,
    grid.grid);
}
