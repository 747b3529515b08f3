// Package worker drains tasks: it claims them under leases, runs each
// through the generator's steps, stores the image, and records the result
// under the lease's fence.
//
// A Pool is a leasequeue.Runner of tasks. Each claim of a task makes an
// attempt (one try at it: its lease, its generator job, the step it got
// to); an executor carries the attempt through its steps and the write
// that ends it (complete, fail, hand back). A Limiter holds one of its
// generator's slots while the steps run.
//
// # A task's life
//
//	             claim: fence+1, attempts+1, lease = owner + expiry
//	+--------+ ------------------------------------------> +---------+
//	| queued |                                             | running |
//	+--------+ <--- fail, transient, attempts left ------- |  lease  |
//	  |    ^        (claimable again after run_after)      |  fence  |
//	  |    +------- release: graceful stop --------------- |         |
//	  |                                                    +---------+
//	  |                           lease expired: claimed   |  ^    |
//	  |                           again (fence+1), or      +--+    |
//	  |                           failed if no attempts left       |
//	  |                                                            |
//	  |     complete (asset row + success, one transaction) -------+--> succeeded
//	  |     fail, permanent or last attempt (error kept) ----------+--> failed
//	  |                                                            |
//	  +--> canceled <-- batch asked to cancel: queued at once; ----+
//	                    running at the next write (step, completion,
//	                    failure, release, expiry) or at a renewal
//
// Inside running, the steps, recorded with the provider's reference so
// that a worker that takes the task over resumes where the last one
// stopped:
//
//	"" --Submit(key = task id)--> submitted --Wait--> waited --Fetch, store bytes--> completion
//
// A step is recorded once doing it again would cost more than the write:
// "submitted" when the wait after it has run StepRecordAfter (100 ms), then
// "waited" when that wait ends; a quick task records none and a worker
// that takes it over submits again under the same key, which the Generator
// contract answers with the same reference. A pool handing a lease back
// records the step it reached first.
//
// # Leases and fences
//
// A claim sets the owner and the expiry (the database's clock) and bumps
// the fence. While a task runs, one renewal loop per pool extends every
// lease it holds every ttl/3, in one call. Every write names the fence; a
// write that matches no row means the lease is gone: the task's context is
// cancelled at once and nothing more is recorded. A renewal that answers
// "lost", or a lease the pool could not renew before its local deadline
// (the time before the claim or the last renewal, plus ttl), cancels the
// task the same way. A worker stopped (SIGSTOP) past its lease therefore
// records nothing when it wakes: its fence is stale.
//
// # Files first, rows after
//
// The image goes to the blob store (temp file, fsync, rename, fsync) before
// the completion commits the asset row and the task's success together. A
// crash between the two leaves an unnamed file that the retry reuses (same
// bytes, same address) or a sweep removes.
//
// # Retries
//
// A transient error puts the task back in the queue after
// RetryBase·2^(attempt-1), capped at RetryMax, with jitter (half fixed,
// half random), until MaxAttempts tries have failed; then it is failed with
// the last error. A permanent error (generator.Permanent) fails it at once.
//
// # Stopping
//
// Stop stops claiming, lets each running step end (within Grace) and then
// hands every lease back instead of starting the next step: the task is
// queued again at once, with its step and reference kept, and the released
// try does not count against MaxAttempts. Steps still running after Grace
// are cancelled and their leases handed back the same way.
//
// # Throughput
//
// A pool leases more tasks than it runs: Concurrency run, and about 50 ms
// of work more wait for a run slot (by the moving average of run times:
// Concurrency more for slow tasks, up to 512 in all for no-op ones); it
// claims again once half of that is free, so claims come in batches. The
// completion of a task is written after its run slot is freed, and steps
// and completions of all the pool's tasks go through one writer each that
// commits whatever is waiting in one transaction (group commit).
package worker
