"""A lock holder for studio's cross-language tests (run by cmd/studio's Go
tests, against $STUDIO_URL with $STUDIO_TOKEN):

    python3 -m tests.holder counter NAME KEY FILE N   # N times: under the lock, read FILE, add 1, write it
    python3 -m tests.holder hold NAME KEY TTL         # hold until killed; print "held FENCE", then "lost" if lost

Each line it prints is flushed at once, so the parent can follow it.
"""

import os
import sys
import time

from studio_locks import Locks


def counter(locks, name, key, path, n):
    for _ in range(n):
        with locks.hold(name, key, ttl=10, wait=120) as lease:
            with open(path, "r+") as f:
                parts = f.read().split()
                count, last_fence = int(parts[0]), int(parts[1])
                if lease.fence <= last_fence:
                    raise SystemExit(f"fence {lease.fence} after {last_fence}")
                # Widen the window in which an unprotected writer would lose
                # an update.
                time.sleep(0.001)
                f.seek(0)
                f.write(f"{count + 1} {lease.fence}\n")
                f.truncate()
                f.flush()
                os.fsync(f.fileno())
    print("done", flush=True)


def hold(locks, name, key, ttl):
    lease = locks.hold(name, key, ttl=ttl, wait=60)
    print("held", lease.fence, flush=True)
    lease.lost.wait()
    print("lost", lease.lost_reason, flush=True)


def main(argv):
    locks = Locks.from_env()
    if argv[0] == "counter":
        counter(locks, argv[1], argv[2], argv[3], int(argv[4]))
    elif argv[0] == "hold":
        hold(locks, argv[1], argv[2], float(argv[3]))
    else:
        raise SystemExit("usage: counter NAME KEY FILE N | hold NAME KEY TTL")


if __name__ == "__main__":
    main(sys.argv[1:])
