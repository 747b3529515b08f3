// One batch page's state: the batch, the newest version of each of its
// tasks, and the tasks picked for publishing. The live updates and the
// page's buttons change it; the views subscribe to it. No DOM here.

// TERMINAL are the states a batch, a task or a publication ends in.
export const TERMINAL = new Set(['succeeded', 'failed', 'canceled']);

// older says whether task version a is older than b: by updated_at (as
// times: the text's fraction digits vary), then, within one instant, an
// ended state beats a running one beats a queued one. Updates can arrive
// out of order (a stream and a re-read of the list cross), so the older
// one is dropped.
const rank = {queued: 0, running: 1, succeeded: 2, failed: 2, canceled: 2};
export function older(a, b) {
  const ta = Date.parse(a.updated_at);
  const tb = Date.parse(b.updated_at);
  return ta < tb || (ta === tb && rank[a.state] < rank[b.state]);
}

// batchState holds a batch and its tasks (in plan order, as the task list
// gives them). Every change calls each subscriber with what changed:
// ('batch'), ('task', task) or ('picked').
export function batchState(batch, tasks) {
  const subscribers = new Set();
  const notify = (what, detail) => subscribers.forEach((fn) => fn(what, detail));
  const s = {
    batch,
    tasks: new Map(), // task id -> task
    picked: new Set(), // task ids
    subscribe(fn) {
      subscribers.add(fn);
      return () => subscribers.delete(fn);
    },
    setBatch(b) {
      s.batch = b;
      notify('batch');
    },
    // putTask keeps t unless a newer version of it is already here.
    putTask(t) {
      const old = s.tasks.get(t.id);
      if (old && older(t, old)) return;
      s.tasks.set(t.id, t);
      notify('task', t);
    },
    // pickable: a task that made an image.
    pickable(id) {
      const t = s.tasks.get(id);
      return Boolean(t && t.state === 'succeeded' && t.asset_id);
    },
    toggle(id) {
      if (s.picked.has(id)) s.picked.delete(id);
      else if (s.pickable(id)) s.picked.add(id);
      notify('picked');
    },
    pickAll() {
      for (const id of s.tasks.keys()) if (s.pickable(id)) s.picked.add(id);
      notify('picked');
    },
    clearPicks() {
      s.picked.clear();
      notify('picked');
    },
    pickedAssets() {
      return [...s.picked].map((id) => s.tasks.get(id).asset_id);
    },
  };
  for (const t of tasks) s.putTask(t);
  return s;
}
