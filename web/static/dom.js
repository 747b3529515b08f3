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

// A problem reads by one rule, the command line's (client.Error): the
// status and title, then the detail as one sentence (one final period),
// then each field at fault that the detail does not state already, as
// "field: message". A server with one field at fault often says it in the
// detail too; it is shown once.

// sentence is s trimmed and ending with exactly one period (or the ? or !
// it ends with); '' stays ''.
export function sentence(s) {
  const t = String(s || '').trim();
  if (!t || /[?!]$/.test(t)) return t;
  return `${t.replace(/\.+$/, '')}.`;
}

// fieldsAtFault are a problem's errors[] the detail does not state
// already, each {field, message} with the message's final periods cut.
export function fieldsAtFault(problem) {
  const p = problem || {};
  const detail = String(p.detail || '');
  const out = [];
  for (const f of Array.isArray(p.errors) ? p.errors : []) {
    const field = String((f && f.field) || '');
    const message = String((f && f.message) || '').trim().replace(/\.+$/, '');
    const line = field ? `${field}: ${message}` : message;
    if (!line || detail.includes(line) || (field && detail.includes(`${field} ${message}`))) continue;
    out.push({field, message});
  }
  return out;
}

// fieldItem is one field at fault as a list item: "field: message".
export function fieldItem(f) {
  return h('li', {'data-field': f.field || null}, f.field ? [h('code', {}, f.field), ': '] : null, f.message);
}

// problemView shows an API error for people, by the rule above. The
// notice names every field at fault in data-fields, those the detail
// states included.
export function problemView(err, lead) {
  const p = err.problem || {};
  const fields = fieldsAtFault(p);
  const all = (Array.isArray(p.errors) ? p.errors : []).map((f) => f && f.field).filter(Boolean);
  const detail = sentence(p.detail);
  return h('div', {class: 'notice bad', role: 'alert', 'data-problem-status': String(err.status || ''), 'data-fields': all.length ? all.join(' ') : null},
    lead ? h('p', {}, h('strong', {}, lead)) : null,
    h('p', {class: 'problem'}, h('strong', {}, `${err.status || ''} ${p.title || ''}`.trim()), detail ? `: ${detail}` : ''),
    fields.length ? h('ul', {class: 'errors'}, fields.map(fieldItem)) : null);
}

// failureView shows any failed call: the API's problem, or why no answer
// came, after lead.
export function failureView(err, lead) {
  if (err && err.name === 'ApiError') return problemView(err, lead);
  const why = err && err.name === 'LostAnswer' ? `No answer from studio: ${err.reason}.` : String((err && err.message) || err);
  return h('div', {class: 'notice warn', role: 'alert'}, h('p', {}, h('strong', {}, lead), ' ', why));
}
