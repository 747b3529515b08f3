// Compose and review. Compose edits a draft (kept in sessionStorage so that
// moving between pages loses nothing). Review freezes the request: the exact
// JSON text to send and a request id made then, with crypto.randomUUID().
// Submit sends that text; when the answer is lost, Submit again sends the
// same text with the same id, so studio answers the batch the first try made
// (200, Idempotent-Replayed) instead of making a second one. Editing the
// draft after a review makes a new id at the next review.

import {api, ApiError, LostAnswer, newRequestID, store, stored} from './api.js';
import {fieldItem, h, problemView, replace} from './dom.js';
import {go} from './router.js';

const DRAFT_KEY = 'studio.draft';
const REVIEW_KEY = 'studio.review';

function defaultDraft() {
  return {
    prompt: '',
    sets: [{collection: 'walk-cycle', frames: 'f01, f02'}],
    providers: ['auto'],
    candidates: 1,
    subjects: [],
    seed: '',
    params: '{}',
  };
}

// frameList splits the frames field: labels separated by commas or new
// lines, trimmed, empty ones dropped.
export function frameList(text) {
  return String(text).split(/[,\n]/).map((s) => s.trim()).filter((s) => s !== '');
}

// resolveProviders turns provider names into generator ids the way the
// planner does: a generator id is itself, a route is its generators, and a
// generator named twice counts once.
export function resolveProviders(cat, names) {
  const gens = new Set(cat.generators.map((g) => g.id));
  const ids = [];
  for (const n of names) {
    const these = gens.has(n) ? [n] : (cat.routes[n] || []);
    for (const id of these) if (!ids.includes(id)) ids.push(id);
  }
  return ids;
}

// build turns a draft into the request body (without request_id) and the
// problems the page can see itself; studio checks everything again.
export function build(draft, cat) {
  const errors = [];
  const body = {};
  const prompt = draft.prompt.trim();
  if (!prompt) errors.push({field: 'prompt', message: 'must not be empty'});
  body.prompt = prompt;
  body.sets = draft.sets.map((s, i) => {
    const frames = frameList(s.frames);
    const collection = s.collection.trim();
    if (!collection) errors.push({field: `sets[${i}].collection`, message: 'must not be empty'});
    if (!frames.length) errors.push({field: `sets[${i}].frames`, message: 'needs at least one frame'});
    frames.forEach((f, j) => {
      const k = frames.indexOf(f);
      if (k !== j) errors.push({field: `sets[${i}].frames[${j}]`, message: `repeats frame ${k + 1} ("${f}")`});
    });
    return {collection, frames};
  });
  if (!body.sets.length) errors.push({field: 'sets', message: 'needs at least one set'});
  body.providers = draft.providers.length ? [...draft.providers] : ['auto'];
  const cand = Number(draft.candidates);
  if (!Number.isInteger(cand) || cand < 1 || cand > 10) errors.push({field: 'candidates', message: 'must be a whole number from 1 to 10'});
  body.candidates = cand;
  body.subjects = [...draft.subjects];
  if (String(draft.seed).trim() !== '') {
    const seed = Number(draft.seed);
    if (!Number.isSafeInteger(seed) || seed < 0) errors.push({field: 'seed', message: 'must be a whole number from 0 to 2^53-1, or empty'});
    body.seed = seed;
  }
  let params = {};
  try {
    params = JSON.parse(draft.params.trim() || '{}');
    if (params === null || typeof params !== 'object' || Array.isArray(params)) throw new Error('not an object');
  } catch {
    errors.push({field: 'params', message: 'must be a JSON object, like {"width": 256}'});
    params = {};
  }
  body.params = params;
  const generators = resolveProviders(cat, body.providers);
  const frames = body.sets.reduce((n, s) => n + s.frames.length, 0);
  const tasks = frames * generators.length * (Number.isInteger(cand) ? cand : 0);
  return {body, errors, count: {tasks, frames, generators, candidates: cand, limit: cat.max_batch_tasks}};
}

function countLine(c) {
  const over = c.tasks > c.limit;
  return h('p', {class: 'count', id: 'task-count', 'data-tasks': String(c.tasks), 'data-limit': String(c.limit), 'aria-live': 'polite'},
    h('strong', {}, `${c.tasks} ${c.tasks === 1 ? 'task' : 'tasks'}`),
    ` = ${c.frames} ${c.frames === 1 ? 'frame' : 'frames'} × ${c.generators.length} ${c.generators.length === 1 ? 'generator' : 'generators'}`,
    c.generators.length ? ` (${c.generators.join(', ')})` : '',
    ` × ${Number.isInteger(c.candidates) ? c.candidates : '?'} ${c.candidates === 1 ? 'candidate' : 'candidates'}. `,
    h('span', {class: over ? 'over' : 'muted'}, over ? `Over the limit of ${c.limit} tasks per batch.` : `Limit: ${c.limit} per batch.`));
}

function fieldErrors(errors) {
  if (!errors.length) return null;
  return h('ul', {class: 'errors', role: 'alert'}, errors.map(fieldItem));
}

export async function composeView(main, cat) {
  const draft = stored(DRAFT_KEY) || defaultDraft();
  // Keep only choices this catalog still offers.
  const names = [...Object.keys(cat.routes), ...cat.generators.map((g) => g.id)];
  draft.providers = draft.providers.filter((p) => names.includes(p));
  draft.subjects = draft.subjects.filter((s) => cat.subjects.includes(s));
  const count = h('div');
  const problems = h('div');
  const setsBox = h('div');

  function changed() {
    store(DRAFT_KEY, draft);
    const b = build(draft, cat);
    replace(count, countLine(b.count));
  }

  const addSet = h('button', {type: 'button', id: 'add-set',
    onclick: () => { draft.sets.push({collection: '', frames: ''}); renderSets(); changed(); document.getElementById(`set-${draft.sets.length - 1}-collection`)?.focus(); }}, 'Add a set');

  function renderSets() {
    addSet.disabled = draft.sets.length >= 20;
    replace(setsBox, draft.sets.map((s, i) => h('div', {class: 'set', 'data-set': String(i)},
      h('div', {}, h('label', {for: `set-${i}-collection`}, `Set ${i + 1}: collection`),
        h('input', {type: 'text', id: `set-${i}-collection`, value: s.collection, maxlength: '100',
          oninput: (e) => { s.collection = e.target.value; changed(); }})),
      h('div', {}, h('label', {for: `set-${i}-frames`}, 'Frames ', h('span', {class: 'hint'}, '(separated by commas)')),
        h('input', {type: 'text', id: `set-${i}-frames`, value: s.frames,
          oninput: (e) => { s.frames = e.target.value; changed(); }})),
      h('button', {type: 'button', class: 'danger', disabled: draft.sets.length === 1, 'aria-label': `Remove set ${i + 1}`,
        onclick: () => { draft.sets.splice(i, 1); renderSets(); changed(); }}, 'Remove'))));
  }

  function check(list, value, id, label) {
    return h('label', {}, h('input', {type: 'checkbox', id, checked: list.includes(value), onchange: (e) => {
      const at = list.indexOf(value);
      if (e.target.checked && at < 0) list.push(value);
      if (!e.target.checked && at >= 0) list.splice(at, 1);
      changed();
    }}), label);
  }

  const routeNames = Object.keys(cat.routes).sort((a, b) => (a === 'auto' ? -1 : b === 'auto' ? 1 : a.localeCompare(b)));
  const form = h('form', {id: 'compose', novalidate: true, onsubmit: (e) => {
    e.preventDefault();
    const b = build(draft, cat);
    if (b.count.tasks > b.count.limit) b.errors.push({field: 'sets', message: `the plan has ${b.count.tasks} tasks; the limit is ${b.count.limit}`});
    if (b.errors.length) {
      replace(problems, fieldErrors(b.errors));
      problems.querySelector('li')?.scrollIntoView({block: 'nearest'});
      return;
    }
    replace(problems);
    openReview(b.body);
  }},
  h('div', {class: 'panel'},
    h('label', {for: 'prompt'}, 'Prompt'),
    h('textarea', {id: 'prompt', maxlength: '2000', rows: '3', placeholder: 'a knight in the rain, side view',
      oninput: (e) => { draft.prompt = e.target.value; changed(); }}, draft.prompt)),
  h('fieldset', {class: 'panel'}, h('legend', {}, 'Sets and frames'),
    setsBox,
    addSet),
  h('fieldset', {class: 'panel'}, h('legend', {}, 'Providers ', h('span', {class: 'hint'}, '(none checked = auto)')),
    h('div', {class: 'checks'},
      routeNames.map((r) => check(draft.providers, r, `provider-${r}`, [r, h('span', {class: 'hint'}, ` (route: ${cat.routes[r].join(', ')})`)])),
      cat.generators.map((g) => check(draft.providers, g.id, `provider-${g.id}`, [g.id, h('span', {class: 'hint'}, ` (${g.kind})`)])))),
  h('div', {class: 'panel row'},
    h('div', {}, h('label', {for: 'candidates'}, 'Candidates ', h('span', {class: 'hint'}, 'per frame and generator, 1–10')),
      h('input', {type: 'number', id: 'candidates', min: '1', max: '10', step: '1', value: String(draft.candidates), inputmode: 'numeric',
        oninput: (e) => { draft.candidates = e.target.value === '' ? '' : Number(e.target.value); changed(); }})),
    h('div', {}, h('label', {for: 'seed'}, 'Seed ', h('span', {class: 'hint'}, '(optional)')),
      h('input', {type: 'number', id: 'seed', min: '0', step: '1', value: String(draft.seed), inputmode: 'numeric',
        oninput: (e) => { draft.seed = e.target.value; changed(); }}))),
  h('fieldset', {class: 'panel'}, h('legend', {}, 'Subjects ', h('span', {class: 'hint'}, '(those you may use)')),
    cat.subjects.length ?
      h('div', {class: 'checks'}, cat.subjects.map((s) => check(draft.subjects, s, `subject-${s}`, s))) :
      h('p', {class: 'muted'}, 'No subjects are available to you.')),
  h('div', {class: 'panel'},
    h('label', {for: 'params'}, 'Params ', h('span', {class: 'hint'}, '(a JSON object; the embedded generators take width, height, delay_ms, fail_attempts)')),
    h('textarea', {id: 'params', class: 'code', rows: '2', spellcheck: 'false',
      oninput: (e) => { draft.params = e.target.value; changed(); }}, draft.params)),
  count,
  problems,
  h('div', {class: 'actions'},
    h('button', {type: 'submit', class: 'primary', id: 'review'}, 'Review'),
    h('button', {type: 'button', id: 'reset', onclick: () => { store(DRAFT_KEY, null); go('#/compose'); }}, 'Start over')));

  replace(main, h('h1', {}, 'Compose'), form);
  renderSets();
  changed();
}

// openReview freezes body: a new request id, unless the last review froze
// the same body and was never refused (then its id is kept: its answer may
// have been lost, and a new id could make a second batch).
function openReview(body) {
  const key = JSON.stringify(body);
  const prev = stored(REVIEW_KEY);
  let id = newRequestID();
  if (prev && prev.key === key && (prev.status === 'new' || prev.status === 'lost')) id = prev.id;
  const text = JSON.stringify({request_id: id, ...body}, null, 2);
  store(REVIEW_KEY, {id, key, text, status: prev && prev.id === id ? prev.status : 'new', lost: prev && prev.id === id ? prev.lost : null});
  go('#/review');
}

export async function reviewView(main, cat) {
  const review = stored(REVIEW_KEY);
  if (!review) {
    go('#/compose');
    return;
  }
  const req = JSON.parse(review.text);
  const b = build({
    prompt: req.prompt, sets: req.sets.map((s) => ({collection: s.collection, frames: s.frames.join(',')})), providers: req.providers,
    candidates: req.candidates, subjects: req.subjects, seed: req.seed ?? '', params: JSON.stringify(req.params)}, cat);
  const out = h('div', {id: 'submit-status', 'aria-live': 'polite'});
  const submit = h('button', {type: 'button', class: 'primary', id: 'submit'}, review.status === 'lost' ? 'Submit again' : 'Submit');
  const edit = h('button', {type: 'button', id: 'edit', onclick: () => go('#/compose')}, 'Edit');

  function lostNotice(reason) {
    return h('div', {class: 'notice warn', role: 'alert', id: 'lost'},
      h('p', {}, h('strong', {}, 'The answer was lost'), `: ${reason}.`),
      h('p', {}, 'studio may or may not have made the batch. Submit again: it sends the same request id ',
        h('code', {class: 'req-id'}, review.id), ', so studio answers the batch the first try made, if it made one, and never makes a second.'));
  }

  if (review.status === 'lost') replace(out, lostNotice(review.lost || 'no answer'));
  if (review.status === 'refused') submit.disabled = true;

  submit.addEventListener('click', async () => {
    submit.disabled = true;
    edit.disabled = true;
    replace(out, h('p', {class: 'muted', id: 'sending'}, `Sending request ${review.id}…`));
    try {
      const res = await api('/v1/generations', {method: 'POST', body: review.text, timeoutMs: 30000});
      store(REVIEW_KEY, null);
      const replayed = res.headers.get('Idempotent-Replayed') === 'true';
      sessionStorage.setItem('studio.flash', replayed ?
        `Submitted again: studio had already made this batch from request ${review.id}, and answered it (no second batch).` :
        `Submitted: studio made this batch from request ${review.id}.`);
      go(`#/batches/${encodeURIComponent(res.data.id)}`);
    } catch (err) {
      if (err instanceof LostAnswer) {
        review.status = 'lost';
        review.lost = err.reason;
        store(REVIEW_KEY, review);
        replace(out, lostNotice(err.reason));
        submit.textContent = 'Submit again';
        submit.disabled = false;
      } else if (err instanceof ApiError) {
        if (err.status === 401) return;
        review.status = 'refused';
        store(REVIEW_KEY, review);
        replace(out, problemView(err, err.status === 409 ?
          'This request id already belongs to a different request. Edit and review again to make a new id.' :
          'studio refused the request. Edit it and review again.'));
      } else {
        replace(out, h('div', {class: 'notice bad', role: 'alert'}, h('p', {}, String(err.message || err))));
        submit.disabled = false;
      }
      edit.disabled = false;
    }
  });

  const sets = h('ul', {}, req.sets.map((s) => h('li', {}, h('strong', {}, s.collection), `: ${s.frames.length} ${s.frames.length === 1 ? 'frame' : 'frames'} (${s.frames.join(', ')})`)));
  replace(main,
    h('h1', {}, 'Review'),
    h('p', {class: 'muted'}, 'This is exactly what Submit sends. Its request id was made when this review opened; every retry sends the same one.'),
    h('div', {class: 'two'},
      h('section', {class: 'panel', 'aria-labelledby': 'sum-h'},
        h('h2', {id: 'sum-h'}, 'Summary'),
        h('dl', {class: 'summary'},
          h('dt', {}, 'Request id'), h('dd', {class: 'req-id', id: 'request-id'}, review.id),
          h('dt', {}, 'Prompt'), h('dd', {}, req.prompt),
          h('dt', {}, 'Sets'), h('dd', {}, sets),
          h('dt', {}, 'Providers'), h('dd', {}, `${req.providers.join(', ')} → ${b.count.generators.join(', ')}`),
          h('dt', {}, 'Candidates'), h('dd', {}, String(req.candidates)),
          h('dt', {}, 'Subjects'), h('dd', {}, req.subjects.length ? req.subjects.join(', ') : 'none'),
          h('dt', {}, 'Seed'), h('dd', {}, req.seed === undefined ? 'none' : String(req.seed)),
          h('dt', {}, 'Params'), h('dd', {}, h('code', {}, JSON.stringify(req.params)))),
        countLine(b.count)),
      h('section', {class: 'panel', 'aria-labelledby': 'json-h'},
        h('h2', {id: 'json-h'}, 'Request'),
        h('pre', {class: 'json', id: 'frozen', tabindex: '0'}, review.text))),
    out,
    h('div', {class: 'actions'}, submit, edit));
  submit.focus();
}
