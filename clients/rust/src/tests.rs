//! Tests against a running studio server: STUDIO_SERVER and STUDIO_TOKEN
//! (and STUDIO_TOKEN_OTHER, a token of another actor, for the scoping
//! test). cmd/studio's TestLockClients starts a server and runs them with
//! those set; without them each test prints SKIPPED and returns.

use super::*;
use std::sync::atomic::{AtomicI64, AtomicUsize};

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

/// The client of the test server, or None (printing SKIPPED) without one.
fn client() -> Option<Client> {
    match (env("STUDIO_SERVER"), env("STUDIO_TOKEN")) {
        (Some(u), Some(t)) => Some(Client::new(&u, &t)),
        _ => {
            println!("SKIPPED: set STUDIO_SERVER and STUDIO_TOKEN to a running studio server");
            None
        }
    }
}

fn fresh_key(label: &str) -> String {
    format!("{}-{}", label, new_request_id())
}

fn lock(c: &Client, ttl_ms: u64) -> Lock {
    c.lock("rust").ttl(Duration::from_millis(ttl_ms)).open().unwrap()
}

/// Stops a lease's renewals, as if its process paused.
fn stop_renewals(lease: &mut Lease) {
    lease.stop_renewer();
}

/// Waits up to 10 s for the key to be free on the server.
fn wait_free(l: &Lock, key: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while l.inspect(key).unwrap().held {
        assert!(Instant::now() < deadline, "the key did not free after its TTL");
        thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn from_env_reads_studio_server_and_token() {
    let Some(_) = client() else { return };
    let c = Client::from_env().unwrap();
    let l = lock(&c, 5000);
    assert_eq!(l.hold(fresh_key("env"), |lease| lease.fence() > 0).unwrap(), true);
}

#[test]
fn hold_fence_inspect_release() {
    let Some(c) = client() else { return };
    let l = lock(&c, 5000);
    let key = fresh_key("basic");
    let fence = l
        .hold(&key, |lease| {
            let info = l.inspect(&key).unwrap();
            assert!(info.held);
            assert_eq!(info.holders.iter().map(|h| h.fence).collect::<Vec<_>>(), vec![lease.fence()]);
            assert_eq!((info.name.as_str(), info.key.as_str(), info.limit), ("rust", key.as_str(), 0));
            assert_eq!(lease.key(), key);
            assert!(!lease.is_lost());
            lease.check().unwrap();
            lease.fence()
        })
        .unwrap();
    assert!(!l.inspect(&key).unwrap().held);
    let next = l.hold(&key, |lease| lease.fence()).unwrap();
    assert!(next > fence, "fence {} after {}", next, fence);
}

#[test]
fn try_hold_is_none_while_held_and_keys_are_exact() {
    let Some(c) = client() else { return };
    let l = lock(&c, 5000);
    let key = fresh_key("é");
    let lease = l.acquire(&key).unwrap();
    let ran = AtomicBool::new(false);
    assert!(l.try_hold(&key, |_| ran.store(true, Ordering::SeqCst)).unwrap().is_none());
    assert!(!ran.load(Ordering::SeqCst));
    // Another key, however close, is another lock.
    assert!(l.try_hold(key.to_uppercase(), |_| ()).unwrap().is_some());
    lease.release().unwrap();
    assert!(l.try_hold(&key, |_| ()).unwrap().is_some());
}

#[test]
fn wait_times_out_with_423() {
    let Some(c) = client() else { return };
    let l = lock(&c, 5000);
    let key = fresh_key("timeout");
    let held = l.acquire(&key).unwrap();
    let waiting = c.lock("rust").ttl(Duration::from_secs(5)).wait(Duration::from_millis(700)).open().unwrap();
    let start = Instant::now();
    let err = waiting.hold(&key, |_| ()).unwrap_err();
    assert!(matches!(err, Error::Busy), "{:?}", err);
    assert_eq!(err.status(), Some(423));
    assert!(start.elapsed() >= Duration::from_millis(600), "gave up after {:?}", start.elapsed());
    held.release().unwrap();
}

#[test]
fn waiter_gets_the_key_after_release() {
    let Some(c) = client() else { return };
    let l = lock(&c, 5000);
    let key = fresh_key("handoff");
    let first = l.acquire(&key).unwrap();
    let f1 = first.fence();
    let (l2, k2) = (l.clone(), key.clone());
    let waiter = thread::spawn(move || l2.hold(&k2, |lease| lease.fence()).unwrap());
    let deadline = Instant::now() + Duration::from_secs(10);
    while l.inspect(&key).unwrap().waiters == 0 {
        assert!(Instant::now() < deadline, "the waiter never waited");
        thread::sleep(Duration::from_millis(10));
    }
    first.release().unwrap();
    assert!(waiter.join().unwrap() > f1);
}

#[test]
fn mutual_exclusion_between_threads() {
    let Some(c) = client() else { return };
    let l = lock(&c, 10_000);
    let key = fresh_key("counter");
    let count = Arc::new(AtomicI64::new(0));
    let inside = Arc::new(AtomicUsize::new(0));
    let fences = Arc::new(Mutex::new(Vec::new()));
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let (l, key, count, inside, fences) = (l.clone(), key.clone(), count.clone(), inside.clone(), fences.clone());
            thread::spawn(move || {
                for _ in 0..10 {
                    l.hold(&key, |lease| {
                        assert_eq!(inside.fetch_add(1, Ordering::SeqCst), 0, "two holders at once");
                        // Read, wait, write: a lost update if two overlapped.
                        let n = count.load(Ordering::SeqCst);
                        thread::sleep(Duration::from_millis(2));
                        count.store(n + 1, Ordering::SeqCst);
                        fences.lock().unwrap().push(lease.fence());
                        inside.fetch_sub(1, Ordering::SeqCst);
                    })
                    .unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(count.load(Ordering::SeqCst), 40);
    let fences = fences.lock().unwrap();
    assert_eq!(fences.len(), 40);
    assert!(fences.windows(2).all(|w| w[0] < w[1]), "fences not growing: {:?}", fences);
}

#[test]
fn renewal_keeps_the_lease_past_its_ttl() {
    let Some(c) = client() else { return };
    let l = lock(&c, 1500);
    let key = fresh_key("renew");
    l.hold(&key, |lease| {
        thread::sleep(Duration::from_millis(3500));
        assert!(!lease.is_lost(), "{:?}", lease.check());
        assert!(l.inspect(&key).unwrap().held);
        assert!(l.try_hold(&key, |_| ()).unwrap().is_none());
    })
    .unwrap();
}

#[test]
fn lease_lost_when_renewals_stop() {
    let Some(c) = client() else { return };
    let l = lock(&c, 1000);
    let key = fresh_key("lost");
    let mut lease = l.acquire(&key).unwrap();
    stop_renewals(&mut lease);
    wait_free(&l, &key);
    // By the local clock the TTL has passed too; pretend it has not, so
    // that the server's refusal is what loses the lease.
    *lease.state.deadline.lock().unwrap() = Instant::now() + Duration::from_secs(10);
    assert!(lease.state.renew_once());
    assert!(lease.is_lost());
    let err = lease.check().unwrap_err();
    assert!(matches!(&err, Error::LeaseLost(why) if why.contains("410")), "{:?}", err);
    let fence = lease.fence();
    assert!(matches!(lease.release(), Err(Error::LeaseLost(_))));
    // The next holder has a larger fence.
    assert!(l.hold(&key, |next| next.fence()).unwrap() > fence);
}

#[test]
fn hold_reports_a_lease_lost_inside_the_closure() {
    let Some(c) = client() else { return };
    let l = lock(&c, 1000);
    let key = fresh_key("lost-hold");
    // The closure sees the loss through is_lost once the renewals stopped
    // past the TTL; hold then answers LeaseLost, not the closure's value.
    let holder = l;
    let err = holder
        .hold(&key, |lease| {
            lease.state.stop_renewals();
            let deadline = Instant::now() + Duration::from_secs(10);
            while holder.inspect(&key).unwrap().held && Instant::now() < deadline {
                thread::sleep(Duration::from_millis(50));
            }
            lease.state.renew_once();
            assert!(lease.is_lost());
            "done"
        })
        .unwrap_err();
    assert!(matches!(err, Error::LeaseLost(_)), "{:?}", err);
}

/// Installs a hook that lets the first acquire through to the server but
/// loses its answer (as a dropped connection would), recording what the
/// server granted; and, with delay_path, sleeps 1.6 s (past a 1 s TTL)
/// before the next call to that path.
fn lose_first_answer(c: &Client, delay_path: Option<&'static str>) -> (Arc<Mutex<Option<Value>>>, Arc<AtomicUsize>) {
    let granted: Arc<Mutex<Option<Value>>> = Arc::new(Mutex::new(None));
    let renewals = Arc::new(AtomicUsize::new(0));
    let delayed = Arc::new(AtomicBool::new(false));
    let (g, r) = (granted.clone(), renewals.clone());
    *c.inner.after.lock().unwrap() = Some(Arc::new(move |path: &str, answer: Result<Answer>| {
        if path == "/v1/locks/acquire" {
            let mut g = g.lock().unwrap();
            if g.is_none() {
                *g = Some(answer.clone().unwrap().body);
                return Err(Error::Transport("connection reset by peer".into()));
            }
        }
        if path == "/v1/locks/renew" {
            r.fetch_add(1, Ordering::SeqCst);
        }
        answer
    }));
    let g = granted.clone();
    *c.inner.before.lock().unwrap() = Some(Arc::new(move |path: &str| {
        if Some(path) == delay_path && g.lock().unwrap().is_some() && !delayed.swap(true, Ordering::SeqCst) {
            thread::sleep(Duration::from_millis(1600));
        }
    }));
    (granted, renewals)
}

#[test]
fn lost_answer_is_retried_with_the_same_request_id() {
    let Some(c) = client() else { return };
    let key = fresh_key("lost-answer");
    let (granted, renewals) = lose_first_answer(&c, None);
    let l = lock(&c, 30_000);
    let lease = l.acquire(&key).unwrap();
    let g = granted.lock().unwrap().clone().unwrap();
    // The retry got the lease the server had granted, not a second one.
    assert_eq!(lease.request_id(), g["request_id"].as_str().unwrap());
    assert_eq!(lease.state.doc.id, g["lease_id"].as_str().unwrap());
    assert_eq!(lease.fence(), g["fence"].as_i64().unwrap());
    assert_eq!(l.inspect(&key).unwrap().holders.len(), 1);
    // Granted at a time the client does not know: renewed at once (the
    // background renewals come only after ttl/3, 10 s).
    assert_eq!(renewals.load(Ordering::SeqCst), 1);
    lease.release().unwrap();
    assert!(!l.inspect(&key).unwrap().held);
}

#[test]
fn lost_answer_whose_lease_ended_asks_anew() {
    // The retry comes after the granted lease's TTL: the server answers
    // 410 for that request id, and the acquire asks anew under a new one.
    let Some(c) = client() else { return };
    let key = fresh_key("lost-late");
    let (granted, _) = lose_first_answer(&c, Some("/v1/locks/acquire"));
    let l = lock(&c, 1000);
    l.hold(&key, |lease| {
        let g = granted.lock().unwrap().clone().unwrap();
        assert_ne!(lease.request_id(), g["request_id"].as_str().unwrap());
        assert!(lease.fence() > g["fence"].as_i64().unwrap());
        let holders: Vec<i64> = l.inspect(&key).unwrap().holders.iter().map(|h| h.fence).collect();
        assert_eq!(holders, vec![lease.fence()]);
    })
    .unwrap();
}

#[test]
fn replayed_lease_that_ended_before_its_renewal_asks_anew() {
    // The retry gets the granted lease back, but it ends before the
    // renewal that follows: the acquire asks anew under a new request id.
    let Some(c) = client() else { return };
    let key = fresh_key("replay-late");
    let (granted, _) = lose_first_answer(&c, Some("/v1/locks/renew"));
    let l = lock(&c, 1000);
    l.hold(&key, |lease| {
        let g = granted.lock().unwrap().clone().unwrap();
        assert_ne!(lease.request_id(), g["request_id"].as_str().unwrap());
        assert!(lease.fence() > g["fence"].as_i64().unwrap());
        assert!(!lease.is_lost());
    })
    .unwrap();
}

#[test]
fn semaphore() {
    let Some(c) = client() else { return };
    let key = fresh_key("sem");
    let sem = c.lock("rust").ttl(Duration::from_secs(5)).limit(2).open().unwrap();
    let a = sem.try_acquire(&key).unwrap().expect("first slot");
    let b = sem.try_acquire(&key).unwrap().expect("second slot");
    assert!(b.fence() > a.fence());
    assert!(sem.try_acquire(&key).unwrap().is_none());
    let info = sem.inspect(&key).unwrap();
    assert_eq!((info.limit, info.holders.len()), (2, 2));
    let other = c.lock("rust").ttl(Duration::from_secs(5)).limit(3).open().unwrap();
    let err = other.try_acquire(&key).unwrap_err();
    assert_eq!(err.status(), Some(409), "{:?}", err);
    a.release().unwrap();
    b.release().unwrap();
}

#[test]
fn bad_input() {
    let Some(c) = client() else { return };
    let err = lock(&c, 5000).try_hold("k".repeat(301), |_| ()).unwrap_err();
    assert!(matches!(&err, Error::Status { status: 400, fields, .. } if fields == &vec!["key".to_string()]), "{:?}", err);
    assert!(matches!(c.lock("no/slash").open(), Err(Error::Invalid(_))));
    assert!(matches!(c.lock("ok").ttl(Duration::from_millis(100)).open(), Err(Error::Invalid(_))));
    assert!(matches!(c.lock("ok").limit(10_001).open(), Err(Error::Invalid(_))));
}

#[test]
fn bad_token_is_a_401() {
    let Some(c) = client() else { return };
    let wrong = Client::new(&c.inner.base, "stu_wrong");
    let err = lock(&wrong, 5000).try_hold("k", |_| ()).unwrap_err();
    assert_eq!(err.status(), Some(401), "{:?}", err);
}

#[test]
fn keys_are_scoped_per_actor() {
    let Some(c) = client() else { return };
    let Some(token) = env("STUDIO_TOKEN_OTHER") else {
        println!("SKIPPED: set STUDIO_TOKEN_OTHER to a token of another actor");
        return;
    };
    let other = Client::new(&c.inner.base, &token);
    let key = fresh_key("scoped");
    let (l, lo) = (lock(&c, 5000), lock(&other, 5000));
    let mine = l.acquire(&key).unwrap();
    assert!(!lo.inspect(&key).unwrap().held);
    let theirs = lo.try_acquire(&key).unwrap().expect("another actor's key is its own");
    assert_ne!(mine.fence(), theirs.fence());
    // Another actor cannot touch my lease even with its id.
    let body = json!({"lease_id": mine.state.doc.id});
    let err = other.call("POST", "/v1/locks/release", &[], Some(&body), Duration::from_secs(10)).unwrap_err();
    assert_eq!(err.status(), Some(404));
    theirs.release().unwrap();
    assert!(l.inspect(&key).unwrap().held);
    mine.release().unwrap();
}
