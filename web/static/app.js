// The studio's entry point: sign-in, the router (#/compose, #/review,
// #/batches, #/batches/ID) and the shared catalog.

import {api, ApiError, LostAnswer, onUnauthorized, setToken, token} from './api.js';
import {h, problemView, replace} from './dom.js';
import {composeView, reviewView} from './compose.js';
import {batchView} from './batch.js';
import {batchesView} from './batches.js';
import {onRoute} from './router.js';

const main = document.getElementById('main');
const nav = document.getElementById('nav');

// catalog is GET /v1/catalog, read once per sign-in.
let catalog = null;
async function getCatalog() {
  if (!catalog) catalog = (await api('/v1/catalog')).data;
  return catalog;
}

let current = null; // the AbortController of the view on screen

// A sign-in link carries the token in the fragment (#token=...), which the
// browser never sends to the server. Take it, then remove it from the
// address bar and the history before anything else runs.
function takeLinkToken() {
  const m = /^#token=([^&]+)/.exec(location.hash);
  if (!m) return null;
  history.replaceState(null, '', `${location.pathname}#/compose`);
  return decodeURIComponent(m[1]);
}

async function signIn(t) {
  // A token is good when the API accepts it: the catalog is the first read.
  const {data} = await api('/v1/catalog', {auth: t});
  setToken(t);
  catalog = data;
}

function signOut() {
  setToken('');
  catalog = null;
  sessionStorage.clear();
  location.hash = '#/signin';
  route();
}

function signInView(message) {
  nav.hidden = true;
  const input = h('input', {type: 'password', id: 'token', name: 'token', autocomplete: 'off', spellcheck: 'false', required: true, placeholder: 'stu_…'});
  const out = h('div', {'aria-live': 'polite'});
  const form = h('form', {class: 'panel', id: 'signin', onsubmit: async (e) => {
    e.preventDefault();
    const t = input.value.trim();
    if (!t) return;
    replace(out, h('p', {class: 'muted'}, 'Checking the token…'));
    try {
      await signIn(t);
      location.hash = '#/compose';
      route();
    } catch (err) {
      if (err instanceof ApiError && err.status === 401) replace(out, h('div', {class: 'notice bad', role: 'alert'}, h('p', {}, 'This token is not valid here.')));
      else if (err instanceof ApiError) replace(out, problemView(err));
      else replace(out, h('div', {class: 'notice bad', role: 'alert'}, h('p', {}, `Could not reach studio: ${err.message}`)));
    }
  }},
  h('label', {for: 'token'}, 'Token'),
  h('p', {class: 'hint'}, 'Paste a token (', h('code', {}, 'studio token create --actor NAME'), ', or the one the first ',
    h('code', {}, 'studio serve'), ' printed and wrote to ', h('code', {}, 'DATA/token'), '). It is kept in this tab only, until you sign out or close it.'),
  input,
  h('div', {class: 'actions'}, h('button', {type: 'submit', class: 'primary'}, 'Sign in')),
  out);
  replace(main, h('h1', {}, 'Sign in'), message ? h('div', {class: 'notice warn', role: 'alert'}, h('p', {}, message)) : null, form);
  input.focus();
}

async function route() {
  if (current) current.abort();
  current = new AbortController();
  const signal = current.signal;
  if (!token()) {
    signInView();
    return;
  }
  nav.hidden = false;
  const hash = location.hash || '#/compose';
  const parts = hash.replace(/^#\/?/, '').split('/').map(decodeURIComponent);
  const page = parts[0] || 'compose';
  for (const a of nav.querySelectorAll('a[data-nav]')) {
    if (a.dataset.nav === page || (page === 'review' && a.dataset.nav === 'compose')) a.setAttribute('aria-current', 'page');
    else a.removeAttribute('aria-current');
  }
  main.dataset.view = page;
  try {
    const cat = await getCatalog();
    if (signal.aborted) return;
    if (page === 'compose' || page === 'signin') await composeView(main, cat, signal);
    else if (page === 'review') await reviewView(main, cat, signal);
    else if (page === 'batches' && parts[1]) await batchView(main, parts[1], cat, signal);
    else if (page === 'batches') await batchesView(main, signal);
    else replace(main, h('h1', {}, 'Not found'), h('p', {}, h('a', {href: '#/compose'}, 'Compose a request')));
  } catch (err) {
    if (signal.aborted) return;
    if (err instanceof ApiError && err.status === 401) return; // onUnauthorized took over
    replace(main, h('h1', {}, 'Something went wrong'),
      err instanceof ApiError ? problemView(err) :
        h('div', {class: 'notice bad', role: 'alert'}, h('p', {}, err instanceof LostAnswer ? `No answer from studio: ${err.reason}.` : String(err.message || err))),
      h('div', {class: 'actions'}, h('button', {type: 'button', onclick: () => route()}, 'Try again')));
  }
  if (!signal.aborted && document.activeElement === document.body) main.focus({preventScroll: true});
}

onUnauthorized(() => {
  setToken('');
  catalog = null;
  if (current) current.abort();
  signInView('studio did not accept the token (it may have been revoked). Sign in again.');
});

document.getElementById('signout').addEventListener('click', signOut);
window.addEventListener('hashchange', () => start());

onRoute(route);

// confirmLinkView asks before a link replaces the token this tab already
// signed in with: a link from someone else could otherwise sign the tab in
// as their actor, and what you compose would go to them.
function confirmLinkView(linked) {
  nav.hidden = true;
  replace(main,
    h('h1', {}, 'Switch token?'),
    h('div', {class: 'notice warn', role: 'alert', id: 'link-confirm'},
      h('p', {}, 'This tab is signed in, and a link asks to sign it in with another token. Use the link\'s token only if the link is yours.')),
    h('div', {class: 'actions'},
      h('button', {type: 'button', id: 'link-keep', class: 'primary', onclick: () => route()}, 'Keep the current token'),
      h('button', {type: 'button', id: 'link-use', onclick: async () => {
        try {
          await signIn(linked);
          route();
        } catch (err) {
          signInView(err instanceof ApiError && err.status === 401 ? 'The link holds a token studio does not accept.' : `Could not sign in with the link: ${err.message}`);
        }
      }}, 'Use the link\'s token')));
  document.getElementById('link-keep').focus();
}

async function start() {
  const linked = takeLinkToken();
  if (linked && token() && token() !== linked) {
    if (current) current.abort();
    confirmLinkView(linked);
    return;
  }
  if (linked) {
    try {
      await signIn(linked);
    } catch (err) {
      signInView(err instanceof ApiError && err.status === 401 ? 'The sign-in link holds a token studio does not accept.' : `Could not sign in with the link: ${err.message}`);
      return;
    }
  }
  route();
}

start();
