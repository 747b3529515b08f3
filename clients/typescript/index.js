// studio-locks: studio's locks from Node 20+ and Bun, with fetch only and no
// dependencies. Plain ESM with JSDoc types; index.d.ts declares the API.
//
//   const locks = new LockClient({ url, token }).lock("summaries", { ttlMs: 30_000 });
//   await locks.withLock(chatId, async (signal, lease) => {
//     await summarize(chatId, { fence: lease.fence, signal }); // signal aborts if the lease is lost
//   });
//
// The protocol is in studio's docs/locks.md ("The lock service over HTTP").

/** The longest wait the server takes in one acquire; longer waits ask again. */
export const MAX_WAIT_PER_REQUEST_MS = 60_000;

const RETRY_STATUSES = new Set([502, 503, 504]);

/** The server refused a call; `status` is 0 when it could not be reached. */
export class LockError extends Error {
  /**
   * @param {number} status
   * @param {string} detail
   * @param {{field: string, message: string}[]} [fields]
   */
  constructor(status, detail, fields = []) {
    super(status ? `${status}: ${detail}` : detail);
    this.name = "LockError";
    this.status = status;
    this.detail = detail;
    this.fields = fields;
  }
}

/** The key was not free within the wait (423). */
export class LockTimeoutError extends LockError {
  /** @param {number} status @param {string} detail */
  constructor(status, detail) {
    super(status, detail);
    this.name = "LockTimeoutError";
  }
}

/** The lease ended before its holder was done. */
export class LeaseLostError extends LockError {
  /** @param {number} status @param {string} detail */
  constructor(status, detail) {
    super(status, detail);
    this.name = "LeaseLostError";
  }
}

/** A client of one studio server's lock API, acting as its token's actor. */
export class LockClient {
  /**
   * @param {{url: string, token: string, timeoutMs?: number}} options
   */
  constructor({ url, token, timeoutMs = 10_000 }) {
    if (!url || !token) throw new TypeError("LockClient needs url and token");
    this.url = url.replace(/\/+$/, "");
    this.token = token;
    this.timeoutMs = timeoutMs;
  }

  /**
   * A client for $STUDIO_SERVER (or $STUDIO_URL, its older name) with the
   * token $STUDIO_TOKEN, as the studio command line reads them. A missing
   * one throws a LockError that names it.
   */
  static fromEnv() {
    const env = globalThis.process?.env ?? {};
    let url = env.STUDIO_SERVER || env.STUDIO_URL || "";
    if (!url) throw new LockError(0, "STUDIO_SERVER is not set: the server's address, such as http://127.0.0.1:7070");
    if (!env.STUDIO_TOKEN) throw new LockError(0, "STUDIO_TOKEN is not set: an API token of the server");
    if (!url.includes("://")) url = "http://" + url;
    return new LockClient({ url, token: env.STUDIO_TOKEN });
  }

  /**
   * The named lock `name` with defaults for its holds.
   * @param {string} name
   * @param {{ttlMs?: number, waitMs?: number | null, limit?: number}} [defaults]
   */
  lock(name, defaults = {}) {
    return new NamedLock(this, name, defaults);
  }

  /**
   * @param {string} method
   * @param {string} path
   * @param {object | undefined} body
   * @param {number} [timeoutMs]
   * @returns {Promise<any>}
   */
  async call(method, path, body, timeoutMs) {
    /** @type {Record<string, string>} */
    const headers = { Authorization: `Bearer ${this.token}`, Accept: "application/json" };
    let data;
    if (body !== undefined) {
      headers["Content-Type"] = "application/json";
      data = JSON.stringify(body);
    }
    let resp;
    try {
      resp = await fetch(this.url + path, {
        method,
        headers,
        body: data,
        signal: AbortSignal.timeout(timeoutMs ?? this.timeoutMs),
      });
    } catch (e) {
      throw new LockError(0, `${method} ${path}: ${e instanceof Error ? e.message : e}`);
    }
    const text = await resp.text().catch(() => "");
    if (!resp.ok) {
      let detail = resp.statusText;
      let fields = [];
      try {
        const doc = JSON.parse(text);
        detail = doc.detail ?? detail;
        fields = doc.errors ?? [];
      } catch {
        // not a problem document
      }
      throw new LockError(resp.status, detail, fields);
    }
    return JSON.parse(text);
  }
}

/** A named lock: hold, tryHold, withLock and inspect its keys. */
export class NamedLock {
  /**
   * @param {LockClient} client
   * @param {string} name
   * @param {{ttlMs?: number, waitMs?: number | null, limit?: number}} defaults
   */
  constructor(client, name, defaults) {
    this.client = client;
    this.name = name;
    this.defaults = { ttlMs: 30_000, waitMs: null, limit: 0, ...defaults };
  }

  /**
   * Wait for the key (waitMs at most; null waits as long as it takes) and
   * return its Lease, renewed every ttl/3 until released. Throws
   * LockTimeoutError when the wait runs out.
   * @param {string} key
   * @param {{ttlMs?: number, waitMs?: number | null, limit?: number}} [options]
   * @returns {Promise<Lease>}
   */
  async hold(key, options = {}) {
    const o = { ...this.defaults, ...options };
    const body = this.#body(key, o.ttlMs, o.limit);
    const start = Date.now();
    for (;;) {
      const left = o.waitMs == null ? null : Math.max(0, o.waitMs - (Date.now() - start));
      const step = left == null ? MAX_WAIT_PER_REQUEST_MS : Math.min(left, MAX_WAIT_PER_REQUEST_MS);
      try {
        return await this.#acquire(body, step);
      } catch (e) {
        if (!(e instanceof LockTimeoutError) || (left != null && left <= step)) throw e;
      }
    }
  }

  /**
   * The Lease if the key is free now, else null.
   * @param {string} key
   * @param {{ttlMs?: number, limit?: number}} [options]
   * @returns {Promise<Lease | null>}
   */
  async tryHold(key, options = {}) {
    const o = { ...this.defaults, ...options };
    try {
      return await this.#acquire(this.#body(key, o.ttlMs, o.limit), 0);
    } catch (e) {
      if (e instanceof LockTimeoutError) return null;
      throw e;
    }
  }

  /**
   * Hold the key while fn runs, then release it. fn gets an AbortSignal
   * that aborts (reason: a LeaseLostError) when the lease is lost, and the
   * Lease. Returns fn's result; if the lease was lost and fn did not throw,
   * throws the LeaseLostError.
   * @template T
   * @param {string} key
   * @param {(signal: AbortSignal, lease: Lease) => Promise<T> | T} fn
   * @param {{ttlMs?: number, waitMs?: number | null, limit?: number}} [options]
   * @returns {Promise<T>}
   */
  async withLock(key, fn, options = {}) {
    const lease = await this.hold(key, options);
    let result;
    try {
      result = await fn(lease.signal, lease);
    } catch (e) {
      await lease.release().catch(() => {});
      throw e;
    }
    await lease.release();
    return result;
  }

  /**
   * Who holds the key (fences and expiries) and how many wait for it.
   * @param {string} key
   * @param {{limit?: number}} [options]
   */
  async inspect(key, options = {}) {
    const limit = options.limit ?? this.defaults.limit;
    const q = new URLSearchParams({ name: this.name, key });
    if (limit) q.set("limit", String(limit));
    return this.client.call("GET", `/v1/locks/inspect?${q}`, undefined);
  }

  /**
   * An acquire's body under a new request id (wait_ms is set per call).
   * @param {string} key @param {number} ttlMs @param {number} limit
   */
  #body(key, ttlMs, limit) {
    return { request_id: crypto.randomUUID(), name: this.name, key, ttl_ms: ttlMs, wait_ms: 0, limit };
  }

  /**
   * One acquire with its tries. A try whose answer is lost (no answer,
   * 502, 503, 504) is sent again with the same request id. If one was
   * lost, the lease that comes back may be the one the lost try was
   * granted, at a time unknown here: it is renewed at once, which says
   * whether it still holds and from when its TTL counts. If it had ended
   * (410 for the id, or for the renewal), the acquire asks anew under a
   * new request id (body.request_id changes).
   * @param {{request_id: string, wait_ms: number}} body @param {number} waitMs
   * @returns {Promise<Lease>}
   */
  async #acquire(body, waitMs) {
    body.wait_ms = waitMs;
    let delay = 50;
    let failures = 0;
    let lostAnswer = false;
    for (;;) {
      let doc;
      try {
        doc = await this.client.call("POST", "/v1/locks/acquire", body, waitMs + this.client.timeoutMs);
      } catch (e) {
        if (!(e instanceof LockError)) throw e;
        if (e.status === 423) throw new LockTimeoutError(e.status, e.detail);
        if (e.status === 410 && lostAnswer) {
          body.request_id = crypto.randomUUID();
          lostAnswer = false;
          continue;
        }
        if ((e.status === 0 || RETRY_STATUSES.has(e.status)) && failures < 5) {
          failures++;
          lostAnswer = true;
          await new Promise((r) => setTimeout(r, delay));
          delay *= 2;
          continue;
        }
        throw e;
      }
      if (!lostAnswer) return new Lease(this.client, doc);
      const sent = performance.now();
      try {
        const renewed = await this.client.call("POST", "/v1/locks/renew", { lease_id: doc.lease_id });
        return new Lease(this.client, { ...doc, expires_at: renewed.expires_at }, sent);
      } catch (e) {
        if (!(e instanceof LockError) || (e.status !== 404 && e.status !== 410)) throw e;
        body.request_id = crypto.randomUUID();
        lostAnswer = false;
      }
    }
  }
}

/**
 * A held lease, renewed every ttl/3 until released. `signal` aborts when the
 * lease is lost: a renewal refused (410 expired or lost, 404 unknown) or
 * none got through within the TTL by the local clock.
 */
export class Lease {
  #client;
  #id;
  #controller = new AbortController();
  /** @type {ReturnType<typeof setTimeout> | undefined} */
  #timer = undefined;
  #deadline;
  #released = false;
  #paused = false;
  /** @type {Promise<void> | null} */
  #renewing = null;

  /**
   * @param {LockClient} client @param {any} doc
   * @param {number} [countedFrom] performance.now() when the lease was last
   * known held (a renewal's sending); by default, now (the acquire's answer
   * came: it was granted just before)
   */
  constructor(client, doc, countedFrom = performance.now()) {
    this.#client = client;
    this.#id = doc.lease_id;
    /** @type {string} */ this.requestId = doc.request_id;
    /** @type {string} */ this.name = doc.name;
    /** @type {string} */ this.key = doc.key;
    /** @type {number} */ this.limit = doc.limit;
    /** @type {number} */ this.fence = doc.fence;
    /** @type {number} */ this.ttlMs = doc.ttl_ms;
    /** @type {string} */ this.expiresAt = doc.expires_at;
    this.#deadline = countedFrom + this.ttlMs;
    this.#schedule(this.ttlMs / 3);
  }

  /** Aborts, with a LeaseLostError as its reason, when the lease is lost. */
  get signal() {
    return this.#controller.signal;
  }

  /** Whether the lease was lost. */
  get lost() {
    return this.#controller.signal.aborted;
  }

  /** Throws the LeaseLostError if the lease was lost. */
  check() {
    if (this.lost) throw this.#controller.signal.reason;
  }

  /** @param {number} status @param {string} detail */
  #lose(status, detail) {
    if (!this.#controller.signal.aborted) this.#controller.abort(new LeaseLostError(status, detail));
    clearTimeout(this.#timer);
    this.#timer = undefined;
  }

  /** @param {number} ms */
  #schedule(ms) {
    this.#timer = setTimeout(() => {
      this.#renewing = this.#renewOnce().then((ok) => {
        this.#renewing = null;
        if (this.#released || this.#paused || this.lost) return;
        const left = this.#deadline - performance.now();
        this.#schedule(ok ? this.ttlMs / 3 : Math.max(50, Math.min(this.ttlMs / 10, left)));
      });
    }, ms);
  }

  /** One renewal; false when it should be tried again soon. */
  async #renewOnce() {
    const sent = performance.now();
    if (sent >= this.#deadline) {
      this.#lose(410, "no renewal got through within the TTL");
      return true;
    }
    try {
      const doc = await this.#client.call("POST", "/v1/locks/renew", { lease_id: this.#id },
        Math.max(500, Math.min(this.ttlMs / 3, this.#deadline - sent)));
      this.#deadline = sent + this.ttlMs;
      this.expiresAt = doc.expires_at;
      return true;
    } catch (e) {
      if (e instanceof LockError && (e.status === 404 || e.status === 410)) {
        this.#lose(e.status, e.detail);
        return true;
      }
      return false;
    }
  }

  /** Stops renewing without telling the server (tests use it as a pause). */
  _stopRenewing() {
    this.#paused = true;
    clearTimeout(this.#timer);
    this.#timer = undefined;
  }

  /** Renews once now (tests use it after a pause). */
  _renewNow() {
    return this.#renewOnce();
  }

  /**
   * Release the lease (once). Throws a LeaseLostError if it had been lost:
   * the work it protected was not protected to the end.
   */
  async release() {
    if (this.#released) return;
    this.#released = true;
    clearTimeout(this.#timer);
    this.#timer = undefined;
    if (this.#renewing) await this.#renewing;
    try {
      await this.#client.call("POST", "/v1/locks/release", { lease_id: this.#id });
    } catch (e) {
      if (e instanceof LockError && (e.status === 404 || e.status === 410)) this.#lose(e.status, e.detail);
      else if (!this.lost) throw e;
    }
    this.check();
  }
}
