// Tests of studio-locks against a running studio server: set STUDIO_URL and
// STUDIO_TOKEN (and STUDIO_TOKEN_OTHER, another actor's token). cmd/studio's
// TestLockClients starts a server and runs `node --test` with them set.
// Without them every test is skipped, saying so.
import { test } from "node:test";
import assert from "node:assert/strict";
import { LockClient, LockError, LockTimeoutError, LeaseLostError } from "../index.js";

const { STUDIO_URL, STUDIO_TOKEN, STUDIO_TOKEN_OTHER } = process.env;
const skip = STUDIO_URL && STUDIO_TOKEN ? false : "set STUDIO_URL and STUDIO_TOKEN to a running studio server";
const client = skip ? null : new LockClient({ url: STUDIO_URL, token: STUDIO_TOKEN });
const fresh = (label) => `${label}-${crypto.randomUUID()}`;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function until(cond, ms = 10_000) {
  const end = Date.now() + ms;
  while (!(await cond())) {
    if (Date.now() > end) throw new Error("condition not met in time");
    await sleep(20);
  }
}

test("withLock holds, fences grow, inspect shows the holder", { skip }, async () => {
  const lock = client.lock("ts", { ttlMs: 5000 });
  const key = fresh("basic");
  const first = await lock.withLock(key, async (signal, lease) => {
    assert.equal(signal.aborted, false);
    assert.ok(lease.fence > 0);
    const info = await lock.inspect(key);
    assert.equal(info.held, true);
    assert.deepEqual(info.holders.map((h) => h.fence), [lease.fence]);
    assert.equal(await lock.tryHold(key), null);
    return lease.fence;
  });
  assert.equal((await lock.inspect(key)).held, false);
  const again = await lock.tryHold(key);
  assert.ok(again.fence > first);
  await again.release();
});

test("withLock returns fn's result and releases when fn throws", { skip }, async () => {
  const lock = client.lock("ts", { ttlMs: 5000 });
  const key = fresh("throw");
  assert.equal(await lock.withLock(key, async () => 42), 42);
  await assert.rejects(lock.withLock(key, async () => { throw new Error("boom"); }), /boom/);
  assert.equal((await lock.inspect(key)).held, false);
});

test("a wait runs out with LockTimeoutError", { skip }, async () => {
  const lock = client.lock("ts", { ttlMs: 5000 });
  const key = fresh("timeout");
  const lease = await lock.hold(key);
  const start = Date.now();
  await assert.rejects(lock.hold(key, { waitMs: 300 }), LockTimeoutError);
  assert.ok(Date.now() - start >= 250);
  await lease.release();
});

test("holders in one process exclude each other and the counter is exact", { skip }, async () => {
  const lock = client.lock("ts", { ttlMs: 5000, waitMs: 60_000 });
  const key = fresh("mutex");
  let count = 0;
  let inside = 0;
  const fences = [];
  await Promise.all(Array.from({ length: 4 }, async () => {
    for (let i = 0; i < 10; i++) {
      await lock.withLock(key, async (_signal, lease) => {
        inside++;
        assert.equal(inside, 1);
        const n = count;
        await sleep(1);
        count = n + 1;
        fences.push(lease.fence);
        inside--;
      });
    }
  }));
  assert.equal(count, 40);
  assert.deepEqual(fences, [...fences].sort((a, b) => a - b));
  assert.equal(new Set(fences).size, 40);
});

test("renewals keep a lease past its TTL", { skip }, async () => {
  const lock = client.lock("ts", { ttlMs: 2000 }); // renewed every ttl/3: room for a loaded machine
  const key = fresh("renew");
  await lock.withLock(key, async (signal) => {
    await sleep(4500);
    assert.equal(signal.aborted, false);
    assert.equal((await lock.inspect(key)).held, true);
  });
});

test("a lease whose renewals stop is lost: the signal aborts and withLock throws", { skip }, async () => {
  const lock = client.lock("ts", { ttlMs: 1000 });
  const key = fresh("lost");
  let fence = 0;
  await assert.rejects(lock.withLock(key, async (signal, lease) => {
    fence = lease.fence;
    lease._stopRenewing(); // as if the process paused
    await until(async () => !(await lock.inspect(key)).held);
    await lease._renewNow();
    assert.equal(signal.aborted, true);
    assert.ok(signal.reason instanceof LeaseLostError);
    assert.match(signal.reason.detail, /expired|within the TTL/); // the server's answer, or the local clock's
  }), LeaseLostError);
  const next = await lock.tryHold(key);
  assert.ok(next.fence > fence);
  await next.release();
});

test("an acquire whose answer is lost is retried with the same request id: one lease, renewed at once", { skip }, async () => {
  const c = new LockClient({ url: STUDIO_URL, token: STUDIO_TOKEN });
  const real = c.call.bind(c);
  let granted = null;
  const renewed = [];
  c.call = async (method, path, body, timeoutMs) => {
    const doc = await real(method, path, body, timeoutMs);
    if (path === "/v1/locks/acquire" && granted === null) {
      granted = doc;
      throw new LockError(0, "connection reset"); // the answer is lost on the way
    }
    if (path === "/v1/locks/renew") renewed.push(doc);
    return doc;
  };
  const lock = c.lock("ts", { ttlMs: 30_000 });
  const key = fresh("lost-answer");
  await lock.withLock(key, async (_signal, lease) => {
    assert.equal(lease.fence, granted.fence);
    assert.equal(lease.requestId, granted.request_id);
    assert.equal((await lock.inspect(key)).holders.length, 1);
    // Granted at a time the client does not know: renewed at once (the
    // background renewals come only after ttl/3, 10 s).
    assert.equal(renewed.length, 1);
    assert.equal(lease.expiresAt, renewed[0].expires_at);
  });
  assert.equal((await lock.inspect(key)).held, false);
});

// A client whose first acquire is granted and its answer lost; the next
// call to delayPath waits 1.6 s (past a 1 s TTL) first.
function answerLostThen(delayPath) {
  const c = new LockClient({ url: STUDIO_URL, token: STUDIO_TOKEN });
  const real = c.call.bind(c);
  const state = { granted: null, delayed: false };
  c.call = async (method, path, body, timeoutMs) => {
    if (path === delayPath && state.granted !== null && !state.delayed) {
      state.delayed = true;
      await sleep(1600);
    }
    const doc = await real(method, path, body, timeoutMs);
    if (path === "/v1/locks/acquire" && state.granted === null) {
      state.granted = doc;
      throw new LockError(0, "connection reset");
    }
    return doc;
  };
  return { lock: c.lock("ts", { ttlMs: 1000 }), state };
}

test("a lost answer whose lease ended before the retry (410): hold asks anew under a new id", { skip }, async () => {
  const { lock, state } = answerLostThen("/v1/locks/acquire");
  const key = fresh("lost-late");
  await lock.withLock(key, async (signal, lease) => {
    assert.notEqual(lease.requestId, state.granted.request_id);
    assert.ok(lease.fence > state.granted.fence);
    assert.deepEqual((await lock.inspect(key)).holders.map((h) => h.fence), [lease.fence]);
    assert.equal(signal.aborted, false);
  });
});

test("a replayed lease that ended before its renewal: hold asks anew under a new id", { skip }, async () => {
  const { lock, state } = answerLostThen("/v1/locks/renew");
  const key = fresh("replay-late");
  await lock.withLock(key, async (signal, lease) => {
    assert.notEqual(lease.requestId, state.granted.request_id);
    assert.ok(lease.fence > state.granted.fence);
    assert.equal(signal.aborted, false);
  });
});

test("semaphore: limit holders, then 423; another limit is 409", { skip }, async () => {
  const lock = client.lock("ts", { ttlMs: 5000, limit: 2 });
  const key = fresh("sem");
  const a = await lock.tryHold(key);
  const b = await lock.tryHold(key);
  assert.ok(a && b);
  assert.equal(await lock.tryHold(key), null);
  const info = await lock.inspect(key);
  assert.equal(info.holders.length, 2);
  assert.equal(info.limit, 2);
  await assert.rejects(lock.tryHold(key, { limit: 3 }), (e) => e instanceof LockError && e.status === 409);
  await a.release();
  await b.release();
});

test("bad input is a 400 naming the field; a bad token a 401", { skip }, async () => {
  await assert.rejects(client.lock("ts").tryHold("k", { ttlMs: 100 }),
    (e) => e instanceof LockError && e.status === 400 && e.fields[0].field === "ttl_ms");
  await assert.rejects(client.lock("no/slash").tryHold("k"), (e) => e.status === 400);
  await assert.rejects(new LockClient({ url: STUDIO_URL, token: "stu_wrong" }).lock("ts").tryHold("k"),
    (e) => e.status === 401);
});

test("keys are scoped per actor", { skip: skip || (STUDIO_TOKEN_OTHER ? false : "set STUDIO_TOKEN_OTHER to another actor's token") }, async () => {
  const mine = client.lock("ts", { ttlMs: 5000 });
  const theirs = new LockClient({ url: STUDIO_URL, token: STUDIO_TOKEN_OTHER }).lock("ts", { ttlMs: 5000 });
  const key = fresh("scoped");
  const a = await mine.hold(key);
  assert.equal((await theirs.inspect(key)).held, false);
  const b = await theirs.tryHold(key);
  assert.ok(b);
  await b.release();
  assert.equal((await mine.inspect(key)).held, true);
  await a.release();
});
