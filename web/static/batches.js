// The actor's batches, newest first (GET /v1/batches, cursor pages).

import {api} from './api.js';
import {failureView, h, replace, stateBadge, when} from './dom.js';

export async function batchesView(main, signal) {
  const body = h('tbody');
  const more = h('button', {type: 'button', id: 'more', hidden: true}, 'Show more');
  const empty = h('p', {class: 'muted', hidden: true}, 'No batches yet. ', h('a', {href: '#/compose'}, 'Compose one.'));
  let cursor = null;

  async function page() {
    more.disabled = true;
    const q = cursor ? `&cursor=${encodeURIComponent(cursor)}` : '';
    const {data} = await api(`/v1/batches?limit=50${q}`, {signal});
    for (const b of data.items) {
      const c = b.counts;
      const ended = c.succeeded + c.failed + c.canceled;
      body.append(h('tr', {'data-batch': b.id},
        h('td', {}, h('a', {href: `#/batches/${encodeURIComponent(b.id)}`}, b.prompt || b.id)),
        h('td', {}, stateBadge(b.state)),
        h('td', {class: 'num'}, `${ended} / ${b.task_count}`),
        h('td', {class: 'num'}, String(c.succeeded)),
        h('td', {class: 'num'}, String(c.failed)),
        h('td', {class: 'num'}, String(c.canceled)),
        h('td', {}, when(b.created_at))));
    }
    cursor = data.next_cursor;
    more.hidden = !cursor;
    more.disabled = false;
    empty.hidden = body.children.length > 0;
  }
  const failed = h('div', {'aria-live': 'polite'});
  // next reads one more page, showing why when it could not.
  function next(lead) {
    replace(failed);
    page().catch((err) => {
      more.disabled = false;
      if (!signal.aborted) replace(failed, failureView(err, lead));
    });
  }
  more.addEventListener('click', () => next('The next page could not be read.'));

  replace(main,
    h('h1', {}, 'Batches'),
    h('table', {class: 'batches'},
      h('thead', {}, h('tr', {},
        h('th', {scope: 'col'}, 'Prompt'), h('th', {scope: 'col'}, 'State'), h('th', {scope: 'col', class: 'num'}, 'Ended'),
        h('th', {scope: 'col', class: 'num'}, 'Succeeded'), h('th', {scope: 'col', class: 'num'}, 'Failed'),
        h('th', {scope: 'col', class: 'num'}, 'Canceled'), h('th', {scope: 'col'}, 'Created'))),
      body),
    empty,
    failed,
    h('div', {class: 'actions'}, more, h('button', {type: 'button', onclick: () => { body.replaceChildren(); cursor = null; next('The batches could not be read.'); }}, 'Refresh')));
  await page();
}
