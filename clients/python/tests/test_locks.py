"""Tests of studio_locks against a running studio server.

Set STUDIO_URL and STUDIO_TOKEN (and STUDIO_TOKEN_OTHER, a token of another
actor, for the scoping test); cmd/studio's TestClients starts a server and
runs these with them set. Without them every test is skipped, saying so.
"""

import os
import threading
import time
import unittest
import uuid

from studio_locks import LeaseLost, LockError, LockTimeout, Locks

URL = os.environ.get("STUDIO_URL")
TOKEN = os.environ.get("STUDIO_TOKEN")


def fresh_key(label):
    return f"{label}-{uuid.uuid4()}"


@unittest.skipUnless(URL and TOKEN, "set STUDIO_URL and STUDIO_TOKEN to a running studio server")
class LocksTest(unittest.TestCase):
    def setUp(self):
        self.locks = Locks(URL, TOKEN)

    def test_hold_fence_inspect_release(self):
        key = fresh_key("basic")
        with self.locks.hold("py", key, ttl=5) as lease:
            self.assertGreater(lease.fence, 0)
            self.assertEqual(lease.key, key)
            info = self.locks.inspect("py", key)
            self.assertTrue(info.held)
            self.assertEqual([h.fence for h in info.holders], [lease.fence])
            self.assertIsNone(self.locks.try_hold("py", key, ttl=5))
            first = lease.fence
        self.assertFalse(lease.lost.is_set())
        self.assertFalse(self.locks.inspect("py", key).held)
        second = self.locks.try_hold("py", key, ttl=5)
        self.assertIsNotNone(second)
        with second:
            self.assertGreater(second.fence, first)

    def test_keys_are_exact(self):
        base = fresh_key("exact")
        keys = [base, base.upper(), base + " ", base + "\x00", base + "é", base + "e\u0301"]
        leases = [self.locks.try_hold("py", k, ttl=5) for k in keys]
        try:
            self.assertTrue(all(leases), "a key that differs only slightly was taken")
        finally:
            for lease in leases:
                if lease:
                    lease.release()

    def test_wait_times_out(self):
        key = fresh_key("timeout")
        with self.locks.hold("py", key, ttl=5):
            start = time.monotonic()
            with self.assertRaises(LockTimeout):
                self.locks.hold("py", key, ttl=5, wait=0.3)
            self.assertGreaterEqual(time.monotonic() - start, 0.25)

    def test_waiter_gets_the_key_after_release(self):
        key = fresh_key("handoff")
        lease = self.locks.hold("py", key, ttl=5)
        got = []
        t = threading.Thread(target=lambda: got.append(self.locks.hold("py", key, ttl=5, wait=30)))
        t.start()
        deadline = time.monotonic() + 10
        while self.locks.inspect("py", key).waiters == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        self.assertEqual(self.locks.inspect("py", key).waiters, 1)
        lease.release()
        t.join(30)
        self.assertEqual(len(got), 1)
        with got[0]:
            self.assertGreater(got[0].fence, lease.fence)

    def test_mutual_exclusion_between_threads(self):
        key = fresh_key("mutex")
        state = {"count": 0, "inside": 0, "overlap": False, "fences": []}

        def work():
            for _ in range(10):
                with self.locks.hold("py", key, ttl=5, wait=60) as lease:
                    state["inside"] += 1
                    if state["inside"] != 1:
                        state["overlap"] = True
                    n = state["count"]
                    time.sleep(0.001)
                    state["count"] = n + 1
                    state["fences"].append(lease.fence)
                    state["inside"] -= 1

        threads = [threading.Thread(target=work) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertFalse(state["overlap"])
        self.assertEqual(state["count"], 40)
        self.assertEqual(state["fences"], sorted(state["fences"]))
        self.assertEqual(len(set(state["fences"])), 40)

    def test_renewal_keeps_the_lease_past_its_ttl(self):
        key = fresh_key("renew")
        # Renewed every ttl/3: a TTL of 2 s leaves room for a loaded machine.
        with self.locks.hold("py", key, ttl=2) as lease:
            time.sleep(4.5)
            self.assertFalse(lease.lost.is_set(), lease.lost_reason)
            self.assertTrue(self.locks.inspect("py", key).held)
            self.assertIsNone(self.locks.try_hold("py", key, ttl=2))

    def test_lease_lost_when_renewals_stop(self):
        key = fresh_key("lost")
        lease = self.locks.hold("py", key, ttl=1)
        # As if the process paused: the renewer stops, the TTL passes.
        lease._stop.set()
        lease._thread.join()
        deadline = time.monotonic() + 10
        while self.locks.inspect("py", key).held and time.monotonic() < deadline:
            time.sleep(0.05)
        self.assertFalse(self.locks.inspect("py", key).held, "the key did not free after its TTL")
        self.assertTrue(lease._renew_once())
        self.assertTrue(lease.lost.is_set())
        self.assertIn("expired", lease.lost_reason)
        with self.assertRaises(LeaseLost):
            lease.release()
        # The next holder has a larger fence.
        with self.locks.hold("py", key, ttl=5) as nxt:
            self.assertGreater(nxt.fence, lease.fence)

    def test_with_block_reports_a_lost_lease(self):
        key = fresh_key("lost-with")
        with self.assertRaises(LeaseLost):
            with self.locks.hold("py", key, ttl=1) as lease:
                lease._stop.set()
                lease._thread.join()
                time.sleep(1.5)
                lease._renew_once()
                self.assertTrue(lease.lost.wait(5))

    def test_lost_answer_is_retried_with_the_same_request_id(self):
        key = fresh_key("lost-answer")
        locks = Locks(URL, TOKEN)
        real = locks._call
        granted, renewed = [], []

        def flaky(method, path, body, timeout=None):
            doc = real(method, path, body, timeout)
            if path == "/v1/locks/acquire" and not granted:
                granted.append(doc)
                raise LockError(0, "connection reset")  # the answer is lost on the way
            if path == "/v1/locks/renew":
                renewed.append(doc)
            return doc

        locks._call = flaky
        with locks.hold("py", key, ttl=30) as lease:
            # The retry got the lease the server had granted, not a second one.
            self.assertEqual(lease._id, granted[0]["lease_id"])
            self.assertEqual(lease.fence, granted[0]["fence"])
            self.assertEqual(len(locks.inspect("py", key).holders), 1)
            # Granted at a time the client does not know: renewed at once
            # (the background renewals come only after ttl/3, 10 s).
            self.assertEqual(len(renewed), 1)
            self.assertEqual(lease.expires_at, renewed[0]["expires_at"])
        self.assertFalse(locks.inspect("py", key).held)

    def _answer_lost_then(self, delay_path):
        """A client whose first acquire is granted and its answer lost;
        the next call to delay_path waits 1.6 s (past a 1 s TTL) first."""
        locks = Locks(URL, TOKEN)
        real = locks._call
        granted, delayed = [], []

        def flaky(method, path, body, timeout=None):
            if path == delay_path and granted and not delayed:
                delayed.append(path)
                time.sleep(1.6)
            doc = real(method, path, body, timeout)
            if path == "/v1/locks/acquire" and not granted:
                granted.append(doc)
                raise LockError(0, "connection reset")
            return doc

        locks._call = flaky
        return locks, granted

    def test_lost_answer_whose_lease_ended_asks_anew(self):
        # The retry comes after the granted lease's TTL: the server answers
        # 410 for that request id, and hold asks anew under a new one.
        key = fresh_key("lost-late")
        locks, granted = self._answer_lost_then("/v1/locks/acquire")
        with locks.hold("py", key, ttl=1) as lease:
            self.assertNotEqual(lease.request_id, granted[0]["request_id"])
            self.assertGreater(lease.fence, granted[0]["fence"])
            holders = locks.inspect("py", key).holders
            self.assertEqual([h.fence for h in holders], [lease.fence])

    def test_replayed_lease_that_ended_before_its_renewal_asks_anew(self):
        # The retry gets the granted lease back, but it ends before the
        # renewal that follows: hold asks anew under a new request id.
        key = fresh_key("replay-late")
        locks, granted = self._answer_lost_then("/v1/locks/renew")
        with locks.hold("py", key, ttl=1) as lease:
            self.assertNotEqual(lease.request_id, granted[0]["request_id"])
            self.assertGreater(lease.fence, granted[0]["fence"])
            self.assertFalse(lease.lost.is_set())

    def test_semaphore(self):
        key = fresh_key("sem")
        a = self.locks.try_hold("py", key, ttl=5, limit=2)
        b = self.locks.try_hold("py", key, ttl=5, limit=2)
        try:
            self.assertIsNotNone(a)
            self.assertIsNotNone(b)
            self.assertIsNone(self.locks.try_hold("py", key, ttl=5, limit=2))
            info = self.locks.inspect("py", key, limit=2)
            self.assertEqual(len(info.holders), 2)
            self.assertEqual(info.limit, 2)
            with self.assertRaises(LockError) as cm:
                self.locks.try_hold("py", key, ttl=5, limit=3)
            self.assertEqual(cm.exception.status, 409)
        finally:
            for lease in (a, b):
                if lease:
                    lease.release()

    def test_bad_input_is_a_400(self):
        with self.assertRaises(LockError) as cm:
            self.locks.try_hold("py", fresh_key("bad"), ttl=0.1)
        self.assertEqual(cm.exception.status, 400)
        self.assertEqual([f["field"] for f in cm.exception.fields], ["ttl_ms"])
        with self.assertRaises(LockError) as cm:
            self.locks.try_hold("no/slash", "k")
        self.assertEqual(cm.exception.status, 400)

    def test_bad_token_is_a_401(self):
        with self.assertRaises(LockError) as cm:
            Locks(URL, "stu_wrong").try_hold("py", "k")
        self.assertEqual(cm.exception.status, 401)

    @unittest.skipUnless(os.environ.get("STUDIO_TOKEN_OTHER"), "set STUDIO_TOKEN_OTHER to a token of another actor")
    def test_keys_are_scoped_per_actor(self):
        other = Locks(URL, os.environ["STUDIO_TOKEN_OTHER"])
        key = fresh_key("scoped")
        with self.locks.hold("py", key, ttl=5) as mine:
            self.assertFalse(other.inspect("py", key).held)
            with other.hold("py", key, ttl=5, wait=0) as theirs:
                self.assertNotEqual(mine.fence, theirs.fence)
                # Another actor cannot touch my lease even with its id.
                with self.assertRaises(LockError) as cm:
                    other._call("POST", "/v1/locks/release", {"lease_id": mine._id})
                self.assertEqual(cm.exception.status, 404)
            self.assertTrue(self.locks.inspect("py", key).held)


if __name__ == "__main__":
    unittest.main()
