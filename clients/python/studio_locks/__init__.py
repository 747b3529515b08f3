"""Locks of a studio server, from Python (standard library only, 3.9+).

    from studio_locks import Locks

    locks = Locks("http://127.0.0.1:7070", token)   # or Locks.from_env()
    with locks.hold("summaries", chat_id, ttl=30) as lease:
        summarize(chat_id, fence=lease.fence)        # renewed every ttl/3 meanwhile
        if lease.lost.is_set():                      # the lease ran out: stop
            ...

The protocol is documented in studio's docs/locks.md ("The lock service over
HTTP"): acquire answers a fence, an expiry and a secret lease id; the holder
renews within its TTL; release frees the key.
"""

from __future__ import annotations

import json
import os
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from typing import Any, Dict, List, Optional

__all__ = [
    "Locks",
    "Lease",
    "Holder",
    "Info",
    "LockError",
    "LockTimeout",
    "LeaseLost",
]

#: The longest wait the server takes in one acquire; longer waits ask again.
MAX_WAIT_PER_REQUEST = 60.0

#: Statuses after which an acquire is sent again with the same request id.
_RETRY_STATUSES = (502, 503, 504)


class LockError(Exception):
    """The server refused a call. ``status`` is the HTTP status (0 when the
    server could not be reached); ``detail`` is its explanation."""

    def __init__(self, status: int, detail: str, fields: Optional[List[Dict[str, str]]] = None):
        message = f"{status}: {detail}" if status else detail
        if fields:
            message += " (" + "; ".join(f"{f.get('field', '')}: {f.get('message', '')}" for f in fields) + ")"
        super().__init__(message)
        self.status = status
        self.detail = detail
        self.fields = fields or []


class LockTimeout(LockError, TimeoutError):
    """The key was not free within the wait."""


class LeaseLost(LockError):
    """The lease ended before its holder was done: it expired (no renewal
    reached the server within its TTL) or the server lost it. The work it
    protected may overlap the next holder's; the fence tells them apart."""


class Holder:
    """One holder of a key as inspect shows it: a fence and an expiry."""

    def __init__(self, fence: int, expires_at: str):
        self.fence = fence
        self.expires_at = expires_at

    def __repr__(self) -> str:
        return f"Holder(fence={self.fence}, expires_at={self.expires_at!r})"


class Info:
    """What the server knows of a key: held or not, its holders (never their
    lease ids), the semaphore limit (0 for a lock) and the acquires waiting
    for it on that server."""

    def __init__(self, doc: Dict[str, Any]):
        self.name: str = doc["name"]
        self.key: str = doc["key"]
        self.limit: int = doc["limit"]
        self.held: bool = doc["held"]
        self.holders: List[Holder] = [Holder(h["fence"], h["expires_at"]) for h in doc["holders"]]
        self.waiters: int = doc["waiters"]

    def __repr__(self) -> str:
        return f"Info(name={self.name!r}, key={self.key!r}, held={self.held}, holders={self.holders}, waiters={self.waiters})"


class Lease:
    """A held lock. Renewed in a background thread every ttl/3 until released.

    ``fence`` grows with every acquisition of the key: send it with every
    write the lease protects. ``lost`` is a threading.Event set when the
    lease ends before release (a renewal refused, or none got through
    within the TTL). Use it as a context manager, or call release().
    """

    def __init__(self, client: "Locks", doc: Dict[str, Any], counted_from: Optional[float] = None):
        self._client = client
        self._id: str = doc["lease_id"]
        self.request_id: str = doc["request_id"]
        self.name: str = doc["name"]
        self.key: str = doc["key"]
        self.limit: int = doc["limit"]
        self.fence: int = doc["fence"]
        self.ttl: float = doc["ttl_ms"] / 1000.0
        self.expires_at: str = doc["expires_at"]
        self.lost = threading.Event()
        self.lost_reason: Optional[str] = None
        self._released = False
        self._stop = threading.Event()
        self._lock = threading.Lock()
        # By the local clock: the lease is surely over after this, counted
        # from when the last good renewal was sent (or the acquire's answer
        # came: it was granted just before).
        self._deadline = (time.monotonic() if counted_from is None else counted_from) + self.ttl
        self._thread = threading.Thread(target=self._renew_loop, name=f"studio-lock-renew-{self.key}", daemon=True)
        self._thread.start()

    def __repr__(self) -> str:
        return f"Lease(name={self.name!r}, key={self.key!r}, fence={self.fence}, lost={self.lost.is_set()})"

    def __enter__(self) -> "Lease":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        try:
            self.release()
        except LeaseLost:
            if exc_type is None:
                raise
        except LockError:
            if exc_type is None:
                raise

    def check(self) -> None:
        """Raise LeaseLost if the lease was lost."""
        if self.lost.is_set():
            raise LeaseLost(410, self.lost_reason or "the lease was lost")

    def _mark_lost(self, reason: str) -> None:
        with self._lock:
            if self.lost_reason is None:
                self.lost_reason = reason
        self.lost.set()
        self._stop.set()

    def _renew_loop(self) -> None:
        interval = self.ttl / 3
        wait = interval
        while not self._stop.wait(wait):
            if time.monotonic() >= self._deadline:
                self._mark_lost("no renewal got through within the TTL")
                return
            ok = self._renew_once()
            if self._stop.is_set():
                return
            # After a failure try again soon, never past the deadline.
            wait = interval if ok else max(0.05, min(self.ttl / 10, self._deadline - time.monotonic()))

    def _renew_once(self) -> bool:
        """One renewal. Returns False when it should be tried again soon."""
        sent = time.monotonic()
        try:
            doc = self._client._call("POST", "/v1/locks/renew", {"lease_id": self._id},
                                     timeout=max(0.5, min(self.ttl / 3, self._deadline - sent)))
        except LockError as e:
            if e.status in (404, 410):
                self._mark_lost(e.detail)
                return True
            return False
        with self._lock:
            self._deadline = sent + self.ttl
            self.expires_at = doc["expires_at"]
        return True

    def release(self) -> None:
        """Release the lease (once; later calls do nothing). Raises LeaseLost
        if it had ended before: the work it protected was not protected to
        the end."""
        with self._lock:
            if self._released:
                return
            self._released = True
        self._stop.set()
        if self._thread is not threading.current_thread():
            self._thread.join()
        if self.lost.is_set():
            # Free it anyway if the server still has it; the answer is 410.
            try:
                self._client._call("POST", "/v1/locks/release", {"lease_id": self._id}, timeout=10)
            except LockError:
                pass
            self.check()
            return
        try:
            self._client._call("POST", "/v1/locks/release", {"lease_id": self._id}, timeout=10)
        except LockError as e:
            if e.status in (404, 410):
                self._mark_lost(e.detail)
                self.check()
            raise


def _acquire_body(name: str, key: str, ttl: float, limit: int) -> Dict[str, Any]:
    """An acquire's body under a new request id (wait_ms is set per call)."""
    return {"request_id": str(uuid.uuid4()), "name": name, "key": key,
            "ttl_ms": int(round(ttl * 1000)), "wait_ms": 0, "limit": limit}


class Locks:
    """A client of one studio server's lock API, acting as the actor of its
    token. Safe to share between threads."""

    def __init__(self, url: str, token: str, timeout: float = 10.0):
        self._url = url.rstrip("/")
        self._token = token
        self._timeout = timeout

    @classmethod
    def from_env(cls) -> "Locks":
        """A client for $STUDIO_SERVER (or $STUDIO_URL, its older name) with
        the token $STUDIO_TOKEN, as the studio command line reads them. A
        missing one raises a LockError that names it."""
        url = os.environ.get("STUDIO_SERVER") or os.environ.get("STUDIO_URL")
        if not url:
            raise LockError(0, "STUDIO_SERVER is not set: the server's address, such as http://127.0.0.1:7070")
        token = os.environ.get("STUDIO_TOKEN")
        if not token:
            raise LockError(0, "STUDIO_TOKEN is not set: an API token of the server")
        if "://" not in url:
            url = "http://" + url
        return cls(url, token)

    def hold(self, name: str, key: str, ttl: float = 30.0, wait: Optional[float] = None, limit: int = 0) -> Lease:
        """Wait for the key (at most ``wait`` seconds; None waits as long as it
        takes) and return its Lease, renewed in the background. Raises
        LockTimeout when the wait runs out. ``limit`` > 0 takes one of that
        many slots of a semaphore instead of the lock.

        One request id names the whole call: if an answer is lost on the way
        and the call is sent again, the server answers the lease it granted
        instead of granting a second one. That lease is renewed at once; if
        it had already ended, the call asks anew under a new id.
        """
        body = _acquire_body(name, key, ttl, limit)
        start = time.monotonic()
        while True:
            left = None if wait is None else max(0.0, wait - (time.monotonic() - start))
            step = MAX_WAIT_PER_REQUEST if left is None else min(left, MAX_WAIT_PER_REQUEST)
            try:
                return self._acquire(body, step)
            except LockTimeout:
                if left is not None and left <= step:
                    raise

    def try_hold(self, name: str, key: str, ttl: float = 30.0, limit: int = 0) -> Optional[Lease]:
        """The Lease if the key is free now, else None."""
        try:
            return self._acquire(_acquire_body(name, key, ttl, limit), 0.0)
        except LockTimeout:
            return None

    def inspect(self, name: str, key: str, limit: int = 0) -> Info:
        """Who holds the key (fences and expiries) and how many wait for it."""
        q = {"name": name, "key": key}
        if limit:
            q["limit"] = str(limit)
        return Info(self._call("GET", "/v1/locks/inspect?" + urllib.parse.urlencode(q), None))

    def _acquire(self, body: Dict[str, Any], wait: float) -> Lease:
        """One acquire with its tries. A try whose answer is lost (no
        answer, 502, 503, 504) is sent again with the same request id. If
        one was lost, the lease that comes back may be the one the lost
        try was granted, at a time unknown here: it is renewed at once,
        which says whether it still holds and from when its TTL counts.
        If it had ended (410 for the id, or for the renewal), the acquire
        asks anew under a new request id (body["request_id"] changes)."""
        body["wait_ms"] = int(round(wait * 1000))
        delay, failures, lost_answer = 0.05, 0, False
        while True:
            try:
                doc = self._call("POST", "/v1/locks/acquire", body, timeout=wait + self._timeout)
            except LockError as e:
                if e.status == 423:
                    raise LockTimeout(e.status, e.detail) from None
                if e.status == 410 and lost_answer:
                    body["request_id"], lost_answer = str(uuid.uuid4()), False
                    continue
                if (e.status == 0 or e.status in _RETRY_STATUSES) and failures < 5:
                    failures, lost_answer = failures + 1, True
                    time.sleep(delay)
                    delay *= 2
                    continue
                raise
            if not lost_answer:
                return Lease(self, doc)
            sent = time.monotonic()
            try:
                renewed = self._call("POST", "/v1/locks/renew", {"lease_id": doc["lease_id"]})
            except LockError as e:
                if e.status in (404, 410):
                    body["request_id"], lost_answer = str(uuid.uuid4()), False
                    continue
                raise
            return Lease(self, dict(doc, expires_at=renewed["expires_at"]), counted_from=sent)

    def _call(self, method: str, path: str, body: Optional[Dict[str, Any]], timeout: Optional[float] = None) -> Dict[str, Any]:
        data = None
        headers = {"Authorization": "Bearer " + self._token, "Accept": "application/json"}
        if body is not None:
            data = json.dumps(body).encode("utf-8")
            headers["Content-Type"] = "application/json"
        req = urllib.request.Request(self._url + path, data=data, headers=headers, method=method)
        try:
            with urllib.request.urlopen(req, timeout=timeout or self._timeout) as resp:
                return json.loads(resp.read().decode("utf-8"))
        except urllib.error.HTTPError as e:
            detail, fields = e.reason, []
            try:
                doc = json.loads(e.read().decode("utf-8"))
                detail, fields = doc.get("detail", detail), doc.get("errors") or []
            except (ValueError, OSError):
                pass
            finally:
                e.close()
            raise LockError(e.code, str(detail), fields) from None
        except (urllib.error.URLError, OSError) as e:
            raise LockError(0, f"{method} {path}: {e}") from None
