// The batch page's header: the batch's state, progress and counts, its
// request, the live status, and Cancel.

import {api, ApiError} from '../api.js';
import {h, problemView, replace, stateBadge, when} from '../dom.js';
import {TERMINAL} from './state.js';

// headerPanel shows state.batch and follows its changes; status is the
// live view's status line.
export function headerPanel(state, path, status, signal) {
  const badge = h('span');
  const bar = h('progress', {id: 'progress', max: '1', value: '0', 'aria-label': 'Tasks ended'});
  const stats = h('div', {class: 'stats', id: 'stats', 'aria-live': 'polite'});
  const cancel = h('button', {type: 'button', class: 'danger', id: 'cancel'}, 'Cancel batch');
  const cancelOut = h('div');

  function render() {
    const b = state.batch;
    const c = b.counts;
    const ended = c.succeeded + c.failed + c.canceled;
    bar.max = b.task_count || 1;
    bar.value = ended;
    replace(badge, stateBadge(b.state));
    badge.id = 'batch-state';
    badge.dataset.state = b.state;
    replace(stats,
      h('span', {id: 'done-count', 'data-ended': String(ended), 'data-total': String(b.task_count)}, h('strong', {}, `${ended} / ${b.task_count}`), ' ended'),
      h('span', {}, `${c.queued} queued`), h('span', {}, `${c.running} running`),
      h('span', {}, `${c.succeeded} succeeded`), h('span', {}, `${c.failed} failed`), h('span', {}, `${c.canceled} canceled`));
    cancel.disabled = TERMINAL.has(b.state);
  }

  cancel.addEventListener('click', async () => {
    cancel.disabled = true;
    try {
      state.setBatch((await api(`${path}/cancel`, {method: 'POST', signal})).data);
      replace(cancelOut);
    } catch (err) {
      if (signal.aborted) return;
      // Cancel is idempotent: after a lost answer, pressing again is safe.
      replace(cancelOut, err instanceof ApiError ? problemView(err) :
        h('div', {class: 'notice warn', role: 'alert'}, h('p', {}, `No answer to the cancel: ${err.reason || err.message}. Cancel again is safe.`)));
      cancel.disabled = false;
    }
  });

  state.subscribe((what) => {
    if (what === 'batch') render();
  });
  render();
  const b = state.batch;
  return h('div', {class: 'panel'},
    h('p', {}, badge, ' ', h('strong', {id: 'prompt'}, b.prompt)),
    bar,
    stats,
    h('p', {class: 'muted'}, `Request ${b.request_id} · created ${when(b.created_at)} · `, status),
    h('div', {class: 'actions'}, cancel, h('a', {href: '#/batches'}, 'All batches')),
    cancelOut);
}
