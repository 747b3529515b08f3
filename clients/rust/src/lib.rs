#![doc = include_str!("../README.md")]
#![warn(missing_docs)]

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

#[cfg(test)]
mod tests;

/// The longest wait the server takes in one acquire; longer waits ask again.
pub const MAX_WAIT_PER_REQUEST: Duration = Duration::from_secs(60);

/// The TTL of a lock opened without [`LockBuilder::ttl`].
pub const DEFAULT_TTL: Duration = Duration::from_secs(30);

/// Tries of one acquire after a lost answer (no answer, 502, 503, 504)
/// before the error is returned.
const MAX_LOST_ANSWERS: u32 = 5;

/// What can go wrong.
#[derive(Debug, Clone)]
pub enum Error {
    /// The key was not free within the wait (the server answered 423).
    Busy,
    /// The lease ended before its holder was done: a renewal was refused
    /// (410: it expired or the server lost it; 404: the server no longer
    /// knows it), or none got through within the TTL by this program's
    /// clock. The work it protected may overlap the next holder's; the
    /// fence tells them apart.
    LeaseLost(String),
    /// The server refused a call: its status, its explanation, and the
    /// fields at fault for a 400.
    Status {
        /// The HTTP status.
        status: u16,
        /// The problem document's detail.
        detail: String,
        /// The fields a 400 names.
        fields: Vec<String>,
    },
    /// The server could not be reached, or its answer was not understood.
    Transport(String),
    /// A bad argument, found before anything was sent.
    Invalid(String),
}

impl Error {
    /// The HTTP status behind the error: 423 for [`Error::Busy`], 410 for
    /// [`Error::LeaseLost`], the server's for [`Error::Status`], None
    /// otherwise.
    pub fn status(&self) -> Option<u16> {
        match self {
            Error::Busy => Some(423),
            Error::LeaseLost(_) => Some(410),
            Error::Status { status, .. } => Some(*status),
            _ => None,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Busy => write!(f, "423: the key was not free within the wait"),
            Error::LeaseLost(why) => write!(f, "lease lost: {}", why),
            Error::Status { status, detail, .. } => write!(f, "{}: {}", status, detail),
            Error::Transport(why) => write!(f, "{}", why),
            Error::Invalid(why) => write!(f, "invalid argument: {}", why),
        }
    }
}

impl std::error::Error for Error {}

/// The result of this crate's calls.
pub type Result<T> = std::result::Result<T, Error>;

/// One answer of the server.
#[derive(Debug, Clone)]
struct Answer {
    status: u16,
    replayed: bool,
    body: Value,
}

#[cfg(test)]
type AfterHook = dyn Fn(&str, Result<Answer>) -> Result<Answer> + Send + Sync;
#[cfg(test)]
type BeforeHook = dyn Fn(&str) + Send + Sync;

struct Inner {
    base: String,
    token: String,
    agent: ureq::Agent,
    timeout: Duration,
    #[cfg(test)]
    before: Mutex<Option<Arc<BeforeHook>>>,
    #[cfg(test)]
    after: Mutex<Option<Arc<AfterHook>>>,
}

/// A client of one studio server's lock API, acting as the actor of its
/// token. Cheap to clone and safe to share between threads.
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Client").field("base", &self.inner.base).finish_non_exhaustive()
    }
}

impl Client {
    /// A client of the server at `url` (`http://host:port`) with a bearer
    /// token.
    pub fn new(url: &str, token: &str) -> Client {
        let agent = ureq::AgentBuilder::new().timeout_connect(Duration::from_secs(10)).build();
        Client {
            inner: Arc::new(Inner {
                base: url.trim_end_matches('/').to_string(),
                token: token.to_string(),
                agent,
                timeout: Duration::from_secs(10),
                #[cfg(test)]
                before: Mutex::new(None),
                #[cfg(test)]
                after: Mutex::new(None),
            }),
        }
    }

    /// A client of `$STUDIO_SERVER` with the token `$STUDIO_TOKEN`.
    pub fn from_env() -> Result<Client> {
        let get = |name: &str| {
            std::env::var(name)
                .ok()
                .filter(|v| !v.is_empty())
                .ok_or_else(|| Error::Invalid(format!("${} is not set", name)))
        };
        Ok(Client::new(&get("STUDIO_SERVER")?, &get("STUDIO_TOKEN")?))
    }

    /// A lock of this name (1 to 64 of `A-Z a-z 0-9 . _ : -`): set its
    /// TTL, wait or limit, then [`LockBuilder::open`] it.
    pub fn lock(&self, name: &str) -> LockBuilder {
        LockBuilder {
            client: self.clone(),
            name: name.to_string(),
            ttl: DEFAULT_TTL,
            wait: None,
            limit: 0,
        }
    }

    /// One call. A non-2xx answer is an [`Error::Status`] with the
    /// problem's detail; no answer is an [`Error::Transport`].
    fn call(&self, method: &str, path: &str, query: &[(&str, &str)], body: Option<&Value>, timeout: Duration) -> Result<Answer> {
        #[cfg(test)]
        {
            let before = self.inner.before.lock().unwrap().clone();
            if let Some(hook) = before {
                hook(path);
            }
        }
        let answer = self.send(method, path, query, body, timeout);
        #[cfg(test)]
        {
            let after = self.inner.after.lock().unwrap().clone();
            if let Some(hook) = after {
                return hook(path, answer);
            }
        }
        answer
    }

    fn send(&self, method: &str, path: &str, query: &[(&str, &str)], body: Option<&Value>, timeout: Duration) -> Result<Answer> {
        let mut req = self
            .inner
            .agent
            .request(method, &format!("{}{}", self.inner.base, path))
            .timeout(timeout)
            .set("Authorization", &format!("Bearer {}", self.inner.token))
            .set("Accept", "application/json");
        for (k, v) in query {
            req = req.query(k, v);
        }
        let res = match body {
            Some(b) => req.set("Content-Type", "application/json").send_string(&b.to_string()),
            None => req.call(),
        };
        match res {
            Ok(resp) => {
                let status = resp.status();
                let replayed = resp.header("Idempotent-Replayed") == Some("true");
                let text = resp
                    .into_string()
                    .map_err(|e| Error::Transport(format!("{} {}: reading the answer: {}", method, path, e)))?;
                let body = serde_json::from_str(&text)
                    .map_err(|e| Error::Transport(format!("{} {}: the answer is not JSON: {}", method, path, e)))?;
                Ok(Answer { status, replayed, body })
            }
            Err(ureq::Error::Status(status, resp)) => {
                let text = resp.into_string().unwrap_or_default();
                let doc: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
                let detail = doc["detail"].as_str().unwrap_or(&text).to_string();
                let fields = doc["errors"]
                    .as_array()
                    .map(|a| a.iter().filter_map(|f| f["field"].as_str().map(String::from)).collect())
                    .unwrap_or_default();
                Err(Error::Status { status, detail, fields })
            }
            Err(ureq::Error::Transport(t)) => Err(Error::Transport(format!("{} {}: {}", method, path, t))),
        }
    }
}

/// The settings of a lock before it is opened.
#[derive(Debug, Clone)]
pub struct LockBuilder {
    client: Client,
    name: String,
    ttl: Duration,
    wait: Option<Duration>,
    limit: u32,
}

impl LockBuilder {
    /// How long the server keeps a key after the last renewal: 500 ms to
    /// 1 h, 30 s by default. Leases renew every TTL/3.
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }

    /// How long `hold` waits for the key before [`Error::Busy`]; without
    /// it, as long as it takes.
    pub fn wait(mut self, wait: Duration) -> Self {
        self.wait = Some(wait);
        self
    }

    /// Makes the lock a semaphore of `limit` slots (1 to 10 000): up to
    /// that many holders per key at once.
    pub fn limit(mut self, limit: u32) -> Self {
        self.limit = limit;
        self
    }

    /// The lock, once its settings are checked (the name, the TTL, the
    /// limit, as the server checks them).
    pub fn open(self) -> Result<Lock> {
        let n = &self.name;
        if n.is_empty()
            || n.len() > 64
            || !n.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'_' || b == b':' || b == b'-')
        {
            return Err(Error::Invalid(format!("lock name {:?}: 1 to 64 of A-Z a-z 0-9 . _ : -", n)));
        }
        if self.ttl < Duration::from_millis(500) || self.ttl > Duration::from_secs(3600) {
            return Err(Error::Invalid(format!("ttl {:?}: 500ms to 1h", self.ttl)));
        }
        if self.limit > 10_000 {
            return Err(Error::Invalid(format!("limit {}: 0 (a lock) or 1 to 10000", self.limit)));
        }
        Ok(Lock {
            client: self.client,
            name: self.name,
            ttl: self.ttl,
            wait: self.wait,
            limit: self.limit,
        })
    }
}

/// A named lock (or semaphore) of the token's actor: its keys are held
/// with [`Lock::hold`] and [`Lock::try_hold`].
#[derive(Debug, Clone)]
pub struct Lock {
    client: Client,
    name: String,
    ttl: Duration,
    wait: Option<Duration>,
    limit: u32,
}

impl Lock {
    /// Waits for `key` (as long as the lock's wait allows), runs `f` with
    /// the lease, renewed every TTL/3 meanwhile, and releases it. Answers
    /// what `f` returned, or [`Error::LeaseLost`] if the lease ended before
    /// `f` did (then `f`'s value is dropped: its work was not protected to
    /// the end), or [`Error::Busy`] if the wait ran out.
    pub fn hold<K: AsRef<str>, T, F: FnOnce(&Lease) -> T>(&self, key: K, f: F) -> Result<T> {
        let lease = self.acquire(key.as_ref())?;
        let out = f(&lease);
        lease.release()?;
        Ok(out)
    }

    /// As [`Lock::hold`] if `key` is free now; `None`, running nothing, if
    /// it is held (or, for a semaphore, every slot is).
    pub fn try_hold<K: AsRef<str>, T, F: FnOnce(&Lease) -> T>(&self, key: K, f: F) -> Result<Option<T>> {
        match self.try_acquire(key.as_ref())? {
            None => Ok(None),
            Some(lease) => {
                let out = f(&lease);
                lease.release()?;
                Ok(Some(out))
            }
        }
    }

    /// Waits for `key` as [`Lock::hold`] does and returns its lease,
    /// renewed in the background until [`Lease::release`] (or its drop).
    pub fn acquire(&self, key: &str) -> Result<Lease> {
        let start = Instant::now();
        let mut request_id = new_request_id();
        loop {
            let left = self.wait.map(|w| w.saturating_sub(start.elapsed()));
            let step = left.map_or(MAX_WAIT_PER_REQUEST, |l| l.min(MAX_WAIT_PER_REQUEST));
            match self.acquire_once(key, &mut request_id, step) {
                Err(Error::Busy) if left.map_or(true, |l| l > step) => continue, // the request's minute ran out, not the wait
                other => return other,
            }
        }
    }

    /// The lease of `key` if it is free now, else `None`.
    pub fn try_acquire(&self, key: &str) -> Result<Option<Lease>> {
        match self.acquire_once(key, &mut new_request_id(), Duration::ZERO) {
            Ok(lease) => Ok(Some(lease)),
            Err(Error::Busy) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Who holds `key` (fences and expiries, never lease ids) and how many
    /// wait for it on that server.
    pub fn inspect<K: AsRef<str>>(&self, key: K) -> Result<Info> {
        let limit = self.limit.to_string();
        let q = [("name", self.name.as_str()), ("key", key.as_ref()), ("limit", limit.as_str())];
        let a = self.client.call("GET", "/v1/locks/inspect", &q, None, self.client.inner.timeout)?;
        Info::from_json(&a.body)
    }

    /// One acquire, with its tries, each under `request_id`. A try whose
    /// answer is lost (no answer, 502, 503, 504) is sent again with the
    /// same id, so that the server answers the lease it granted instead
    /// of granting a second one. A replayed lease (200 with
    /// Idempotent-Replayed) was granted at a time unknown here: it is
    /// renewed at once, which says whether it still holds and from when
    /// its TTL counts. If it had ended (410 for the id, or 404/410 for the
    /// renewal) the acquire asks anew under a new id.
    fn acquire_once(&self, key: &str, request_id: &mut String, wait: Duration) -> Result<Lease> {
        let mut delay = Duration::from_millis(50);
        let mut failures = 0;
        loop {
            let body = json!({
                "request_id": request_id.as_str(), "name": self.name, "key": key,
                "ttl_ms": self.ttl.as_millis() as u64, "wait_ms": wait.as_millis() as u64, "limit": self.limit,
            });
            let answer = self.client.call("POST", "/v1/locks/acquire", &[], Some(&body), wait + self.client.inner.timeout);
            let a = match answer {
                Ok(a) => a,
                Err(Error::Status { status: 423, .. }) => return Err(Error::Busy),
                Err(Error::Status { status: 410, .. }) => {
                    // A lost try's lease ended before this retry came.
                    *request_id = new_request_id();
                    continue;
                }
                Err(e) if lost_answer(&e) && failures < MAX_LOST_ANSWERS => {
                    failures += 1;
                    thread::sleep(delay);
                    delay *= 2;
                    continue;
                }
                Err(e) => return Err(e),
            };
            let doc = LeaseDoc::from_json(&a.body)?;
            if !(a.status == 200 && a.replayed) {
                return Ok(Lease::start(self.client.clone(), doc, Instant::now()));
            }
            let sent = Instant::now();
            match self.client.call("POST", "/v1/locks/renew", &[], Some(&json!({"lease_id": doc.id})), self.client.inner.timeout) {
                Ok(_) => return Ok(Lease::start(self.client.clone(), doc, sent)),
                Err(Error::Status { status: 404, .. }) | Err(Error::Status { status: 410, .. }) => {
                    *request_id = new_request_id();
                }
                Err(e) => return Err(e),
            }
        }
    }
}

/// Whether an acquire's answer may have been lost on the way, so that the
/// same request id is sent again.
fn lost_answer(e: &Error) -> bool {
    matches!(e, Error::Transport(_)) || matches!(e.status(), Some(502) | Some(503) | Some(504))
}

fn new_request_id() -> String {
    uuid::Uuid::new_v4().to_string()
}

/// A lease as the server writes it.
#[derive(Debug, Clone)]
struct LeaseDoc {
    id: String,
    request_id: String,
    name: String,
    key: String,
    limit: u32,
    fence: i64,
    ttl: Duration,
}

impl LeaseDoc {
    fn from_json(v: &Value) -> Result<LeaseDoc> {
        let bad = || Error::Transport(format!("the lease in the answer is not understood: {}", v));
        Ok(LeaseDoc {
            id: v["lease_id"].as_str().ok_or_else(bad)?.to_string(),
            request_id: v["request_id"].as_str().ok_or_else(bad)?.to_string(),
            name: v["name"].as_str().ok_or_else(bad)?.to_string(),
            key: v["key"].as_str().ok_or_else(bad)?.to_string(),
            limit: v["limit"].as_u64().ok_or_else(bad)? as u32,
            fence: v["fence"].as_i64().ok_or_else(bad)?,
            ttl: Duration::from_millis(v["ttl_ms"].as_u64().ok_or_else(bad)?),
        })
    }
}

/// What a lease and its renewal thread share.
struct LeaseState {
    client: Client,
    doc: LeaseDoc,
    lost: AtomicBool,
    /// Why it was lost (set once, before `lost`).
    reason: Mutex<Option<String>>,
    /// By this program's clock: the lease is surely over after this,
    /// counted from when the last good renewal was sent.
    deadline: Mutex<Instant>,
    /// Set to stop the renewals; the condvar wakes the thread.
    stop: Mutex<bool>,
    wake: Condvar,
}

impl LeaseState {
    fn mark_lost(&self, why: String) {
        {
            let mut r = self.reason.lock().unwrap();
            if r.is_none() {
                *r = Some(why);
            }
        }
        self.lost.store(true, Ordering::SeqCst);
        self.stop_renewals();
    }

    fn stop_renewals(&self) {
        *self.stop.lock().unwrap() = true;
        self.wake.notify_all();
    }

    fn lost_error(&self) -> Error {
        let why = self.reason.lock().unwrap().clone().unwrap_or_default();
        Error::LeaseLost(format!("{}/{}, fence {}: {}", self.doc.name, self.doc.key, self.doc.fence, why))
    }

    /// One renewal. Answers false when it should be tried again soon.
    fn renew_once(&self) -> bool {
        let sent = Instant::now();
        let deadline = *self.deadline.lock().unwrap();
        if sent >= deadline {
            self.mark_lost("no renewal got through within the TTL".to_string());
            return true;
        }
        let timeout = (self.doc.ttl / 3).min(deadline - sent).max(Duration::from_millis(1));
        match self.client.call("POST", "/v1/locks/renew", &[], Some(&json!({"lease_id": self.doc.id})), timeout) {
            Ok(_) => {
                *self.deadline.lock().unwrap() = sent + self.doc.ttl;
                true
            }
            Err(e @ Error::Status { status: 404, .. }) | Err(e @ Error::Status { status: 410, .. }) => {
                self.mark_lost(format!("the server refused the renewal: {}", e));
                true
            }
            Err(_) => {
                if Instant::now() >= deadline {
                    self.mark_lost("no renewal got through within the TTL".to_string());
                    return true;
                }
                false
            }
        }
    }

    /// Renews every TTL/3 (sooner after a failure) until stopped or lost.
    fn renew_loop(&self) {
        let interval = self.doc.ttl / 3;
        let mut wait = interval;
        loop {
            {
                let stop = self.stop.lock().unwrap();
                let (stop, _) = self.wake.wait_timeout_while(stop, wait, |s| !*s).unwrap();
                if *stop {
                    return;
                }
            }
            let ok = self.renew_once();
            if !ok {
                let left = self.deadline.lock().unwrap().saturating_duration_since(Instant::now());
                wait = (self.doc.ttl / 10).min(left).max(Duration::from_millis(50));
            } else {
                wait = interval;
            }
        }
    }
}

/// A held key. Renewed by a background thread every TTL/3 until released
/// (by [`Lease::release`], or when dropped). Check [`Lease::is_lost`] (or
/// [`Lease::check`]) before each write it protects, and send
/// [`Lease::fence`] with the write.
pub struct Lease {
    state: Arc<LeaseState>,
    renewer: Option<thread::JoinHandle<()>>,
    released: bool,
}

impl fmt::Debug for Lease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lease")
            .field("name", &self.state.doc.name)
            .field("key", &self.state.doc.key)
            .field("fence", &self.state.doc.fence)
            .field("lost", &self.is_lost())
            .finish()
    }
}

impl Lease {
    fn start(client: Client, doc: LeaseDoc, counted_from: Instant) -> Lease {
        let state = Arc::new(LeaseState {
            client,
            deadline: Mutex::new(counted_from + doc.ttl),
            doc,
            lost: AtomicBool::new(false),
            reason: Mutex::new(None),
            stop: Mutex::new(false),
            wake: Condvar::new(),
        });
        let s = Arc::clone(&state);
        let renewer = thread::Builder::new()
            .name(format!("studio-lock-renew-{}", state.doc.key))
            .spawn(move || s.renew_loop())
            .expect("spawn the renewal thread");
        Lease { state, renewer: Some(renewer), released: false }
    }

    /// Larger than every earlier fence of the key: send it with each write
    /// the lease protects, and have the resource refuse smaller ones.
    pub fn fence(&self) -> i64 {
        self.state.doc.fence
    }

    /// The key held.
    pub fn key(&self) -> &str {
        &self.state.doc.key
    }

    /// The lock's name.
    pub fn name(&self) -> &str {
        &self.state.doc.name
    }

    /// The semaphore's limit; 0 for a lock.
    pub fn limit(&self) -> u32 {
        self.state.doc.limit
    }

    /// The request id of the acquire that got this lease (one per acquire,
    /// sent on every try).
    pub fn request_id(&self) -> &str {
        &self.state.doc.request_id
    }

    /// The lease's TTL.
    pub fn ttl(&self) -> Duration {
        self.state.doc.ttl
    }

    /// Whether the lease ended before its release: stop writing under its
    /// fence.
    pub fn is_lost(&self) -> bool {
        self.state.lost.load(Ordering::SeqCst)
    }

    /// [`Error::LeaseLost`] (with the reason) once the lease was lost.
    pub fn check(&self) -> Result<()> {
        if self.is_lost() {
            return Err(self.state.lost_error());
        }
        Ok(())
    }

    fn stop_renewer(&mut self) {
        self.state.stop_renewals();
        if let Some(h) = self.renewer.take() {
            let _ = h.join();
        }
    }

    /// Frees the key (the next waiter may hold it when this returns) and
    /// stops the renewals. [`Error::LeaseLost`] if the lease had been lost:
    /// the work it protected was not protected to the end.
    pub fn release(mut self) -> Result<()> {
        self.released = true;
        self.release_now()
    }

    fn release_now(&mut self) -> Result<()> {
        self.stop_renewer();
        let body = json!({"lease_id": self.state.doc.id});
        let c = &self.state.client;
        if self.is_lost() {
            // Free it anyway if the server still has it.
            let _ = c.call("POST", "/v1/locks/release", &[], Some(&body), c.inner.timeout);
            return Err(self.state.lost_error());
        }
        match c.call("POST", "/v1/locks/release", &[], Some(&body), c.inner.timeout) {
            Ok(_) => Ok(()),
            Err(e @ Error::Status { status: 404, .. }) | Err(e @ Error::Status { status: 410, .. }) => {
                self.state.mark_lost(format!("the server refused the release: {}", e));
                Err(self.state.lost_error())
            }
            Err(e) => Err(e),
        }
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if !self.released {
            self.released = true;
            let _ = self.release_now();
        }
    }
}

/// One holder of a key as inspect shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holder {
    /// Its fence.
    pub fence: i64,
    /// When the server frees the key unless renewed (RFC 3339, server
    /// clock).
    pub expires_at: String,
}

/// What the server knows of a key.
#[derive(Debug, Clone)]
pub struct Info {
    /// The lock's name.
    pub name: String,
    /// The key.
    pub key: String,
    /// The semaphore's limit; 0 for a lock.
    pub limit: u32,
    /// Whether any lease holds it.
    pub held: bool,
    /// The holders, smallest fence first (never their lease ids).
    pub holders: Vec<Holder>,
    /// The acquires waiting for it on that server.
    pub waiters: u64,
}

impl Info {
    fn from_json(v: &Value) -> Result<Info> {
        let bad = || Error::Transport(format!("the inspect answer is not understood: {}", v));
        let mut holders = Vec::new();
        for h in v["holders"].as_array().ok_or_else(bad)? {
            holders.push(Holder {
                fence: h["fence"].as_i64().ok_or_else(bad)?,
                expires_at: h["expires_at"].as_str().ok_or_else(bad)?.to_string(),
            });
        }
        Ok(Info {
            name: v["name"].as_str().ok_or_else(bad)?.to_string(),
            key: v["key"].as_str().ok_or_else(bad)?.to_string(),
            limit: v["limit"].as_u64().ok_or_else(bad)? as u32,
            held: v["held"].as_bool().ok_or_else(bad)?,
            holders,
            waiters: v["waiters"].as_u64().ok_or_else(bad)?,
        })
    }
}
