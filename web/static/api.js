// The studio's side of the /v1 API: the bearer token (sessionStorage only:
// it lives as long as the browser tab and never reaches persistent storage or a
// cookie), JSON calls, and the difference between an answer and no answer.

const TOKEN_KEY = 'studio.token';

export function token() {
  return sessionStorage.getItem(TOKEN_KEY) || '';
}

export function setToken(t) {
  if (t) sessionStorage.setItem(TOKEN_KEY, t);
  else sessionStorage.removeItem(TOKEN_KEY);
}

// stored reads a JSON value this tab kept in sessionStorage (null when
// there is none). An entry that is not JSON was damaged outside the page:
// it is removed and reads as none, which every caller treats as "start
// afresh".
export function stored(key) {
  const text = sessionStorage.getItem(key);
  if (text === null) return null;
  try {
    return JSON.parse(text);
  } catch (err) {
    console.warn(`sessionStorage ${key} is not JSON (${err.message}); dropped`);
    sessionStorage.removeItem(key);
    return null;
  }
}

// store keeps v as JSON in sessionStorage; null removes the entry.
export function store(key, v) {
  if (v === null) sessionStorage.removeItem(key);
  else sessionStorage.setItem(key, JSON.stringify(v));
}

// sleep resolves after ms, or as soon as signal aborts.
export function sleep(ms, signal) {
  const done = signal ? AbortSignal.any([signal, AbortSignal.timeout(ms)]) : AbortSignal.timeout(ms);
  return new Promise((resolve) => {
    if (done.aborted) resolve();
    else done.addEventListener('abort', () => resolve(), {once: true});
  });
}

// ApiError is an answer from studio that refuses the request: a 4xx, or a
// 5xx that studio itself wrote as a problem document for a read. It carries
// the problem document (type, title, status, detail, errors).
export class ApiError extends Error {
  constructor(status, problem) {
    super((problem && problem.detail) || `HTTP ${status}`);
    this.name = 'ApiError';
    this.status = status;
    this.problem = problem || {title: `HTTP ${status}`};
  }
}

// LostAnswer means the request may or may not have done its work: the
// connection failed, no answer came in time, the browser is offline, or
// something between here and studio answered for it (a proxy's 502/503/504,
// any 5xx to a POST). Retrying an intent with the same request id is safe.
// Its reason is a clause without a final period, which the page puts in a
// sentence of its own.
export class LostAnswer extends Error {
  constructor(reason, status) {
    super(reason);
    this.name = 'LostAnswer';
    this.reason = reason;
    this.status = status || 0;
  }
}

// Unauthorized is called when studio answers 401 (the token is missing or
// no longer valid); the app sends the user to sign in.
let unauthorized = () => {};
export function onUnauthorized(fn) {
  unauthorized = fn;
}

// api calls one route. It resolves {status, headers, data} for a 2xx and
// rejects with ApiError or LostAnswer. body, when given, must already be
// the exact JSON text to send.
export async function api(path, {method = 'GET', body, headers = {}, timeoutMs = 20000, signal, auth = token()} = {}) {
  const timeout = AbortSignal.timeout(timeoutMs);
  const h = {Accept: 'application/json', ...headers};
  if (auth) h.Authorization = `Bearer ${auth}`;
  if (body !== undefined) h['Content-Type'] = 'application/json';
  let res;
  try {
    res = await fetch(path, {method, body, headers: h, signal: signal ? AbortSignal.any([signal, timeout]) : timeout,
      cache: 'no-store', credentials: 'omit', redirect: 'error'});
  } catch (e) {
    if (signal && signal.aborted) throw e;
    if (timeout.aborted) throw new LostAnswer(`no answer within ${Math.round(timeoutMs / 1000)} s`);
    if (!navigator.onLine) throw new LostAnswer('the browser is offline');
    throw new LostAnswer('the connection failed before an answer arrived');
  }
  let text;
  try {
    text = await res.text();
  } catch (e) {
    if (signal && signal.aborted) throw e;
    throw new LostAnswer(timeout.aborted ? `the answer did not finish within ${Math.round(timeoutMs / 1000)} s` : 'the answer was cut off', res.status);
  }
  const type = res.headers.get('Content-Type') || '';
  // A body that is not JSON is not lost: below, a 2xx without readable
  // data is a LostAnswer and an error answer shows its text.
  let data = null;
  if (text && /json/.test(type)) {
    try {
      data = JSON.parse(text);
    } catch {
      data = null;
    }
  }
  if (res.ok) {
    if (data === null && text) throw new LostAnswer('the answer was not readable', res.status);
    return {status: res.status, headers: res.headers, data};
  }
  const isProblem = type.startsWith('application/problem+json') && data && typeof data === 'object';
  if (res.status === 401) {
    // Only the stored token's refusal signs out; a token being tried at
    // sign-in is just refused.
    if (auth && auth === token()) unauthorized();
    throw new ApiError(401, isProblem ? data : null);
  }
  // A 5xx is never a refusal of the input. To a POST it means "don't know
  // whether it happened"; a gateway's page (not our problem document) too.
  if (res.status >= 500 && (method !== 'GET' || !isProblem || res.status === 502 || res.status === 504)) {
    // A reason is shown inside a sentence that ends it: no final period.
    const what = isProblem && data.detail ? `: ${String(data.detail).trim().replace(/\.+$/, '')}` : '';
    throw new LostAnswer(`the server or a proxy answered ${res.status} ${res.statusText || ''}`.trim() + what, res.status);
  }
  throw new ApiError(res.status, isProblem ? data : {title: res.statusText || `HTTP ${res.status}`, status: res.status, detail: text.slice(0, 300)});
}

// listAll reads every page of a list route (limit 500 a page).
export async function listAll(path, {signal} = {}) {
  const items = [];
  let cursor = null;
  const sep = path.includes('?') ? '&' : '?';
  for (;;) {
    const url = `${path}${sep}limit=500${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ''}`;
    const {data} = await api(url, {signal});
    items.push(...data.items);
    if (!data.next_cursor) return items;
    cursor = data.next_cursor;
  }
}

// newRequestID names one intent. It is made once, when the user freezes a
// request, and sent again unchanged on every retry of that request.
// crypto.randomUUID exists only in secure contexts (https, localhost); over
// plain http to another host the same version 4 UUID is made by hand.
export function newRequestID() {
  if (typeof crypto.randomUUID === 'function') return crypto.randomUUID();
  const b = crypto.getRandomValues(new Uint8Array(16));
  b[6] = (b[6] & 0x0f) | 0x40;
  b[8] = (b[8] & 0x3f) | 0x80;
  const x = [...b].map((v) => v.toString(16).padStart(2, '0')).join('');
  return `${x.slice(0, 8)}-${x.slice(8, 12)}-${x.slice(12, 16)}-${x.slice(16, 20)}-${x.slice(20)}`;
}
