// Small DOM helpers. Text always goes in as text nodes, never as HTML, so
// nothing a user or the server wrote can run as markup.

// h builds an element: h('button', {class: 'primary', onclick: fn}, 'Send').
// Attributes whose value is false, null or undefined are left out; "on*"
// keys become event listeners; children may be strings, nodes, arrays or
// null.
export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === false || v === null || v === undefined) continue;
    if (k.startsWith('on') && typeof v === 'function') {
      el.addEventListener(k.slice(2), v);
    } else if (k === 'dataset') {
      Object.assign(el.dataset, v);
    } else if (k === 'value') {
      el.value = v;
    } else if (k === 'checked') {
      el.checked = Boolean(v);
    } else {
      el.setAttribute(k, v === true ? '' : String(v));
    }
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const c of children) {
    if (c === null || c === undefined || c === false) continue;
    if (Array.isArray(c)) append(el, c);
    else el.append(c instanceof Node ? c : String(c));
  }
}

// replace empties el and puts children in it.
export function replace(el, ...children) {
  el.replaceChildren();
  append(el, children);
  return el;
}

// when formats an RFC 3339 time for people, in the browser's locale.
export function when(iso) {
  if (!iso) return '';
  const d = new Date(iso);
  return Number.isNaN(d.getTime()) ? iso : d.toLocaleString();
}

// stateBadge is a batch, task or publication state as a coloured label.
export function stateBadge(state) {
  return h('span', {class: `state ${state}`, 'data-state': state}, state);
}

// problemView shows an API error: status, title, detail and the fields at
// fault, for people.
export function problemView(err, lead) {
  const p = err.problem || {};
  const fields = Array.isArray(p.errors) ? p.errors : [];
  return h('div', {class: 'notice bad', role: 'alert', 'data-problem-status': String(err.status || '')},
    lead ? h('p', {}, h('strong', {}, lead)) : null,
    h('p', {}, h('strong', {}, `${err.status || ''} ${p.title || ''}`.trim()), p.detail ? `: ${p.detail}` : ''),
    fields.length ? h('ul', {class: 'errors'},
      fields.map((f) => h('li', {'data-field': f.field}, h('code', {}, f.field), ' ', f.message))) : null);
}

// failureView shows any failed call: the API's problem, or why no answer
// came, after lead.
export function failureView(err, lead) {
  if (err && err.name === 'ApiError') return problemView(err, lead);
  const why = err && err.name === 'LostAnswer' ? `No answer from studio: ${err.reason}.` : String((err && err.message) || err);
  return h('div', {class: 'notice warn', role: 'alert'}, h('p', {}, h('strong', {}, lead), ' ', why));
}
