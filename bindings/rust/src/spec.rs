//! The host surface in one place: what a binding or the CLI asks to acquire ([`LockSpec`]),
//! with each option's default and check, and the conversions of host values (durations,
//! permit counts, fencing tokens, read/write) that every host needs. Python, Node and the
//! CLI build a `LockSpec` and call [`LockSpec::acquire`]; they add only what their language
//! needs (context managers, `AbortSignal`, GIL release).

use std::time::Duration;

use dlock_core::MAX_PERMITS;

use crate::{Client, DEFAULT_LEASE, Error, SharedGuard};

/// Which primitive to acquire.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Primitive {
    /// A lock ([`Client::lock`]).
    Lock { name: String },
    /// One permit of a semaphore with `permits` permits ([`Client::semaphore`]).
    Semaphore { name: String, permits: u32 },
    /// The read or the write hold of a read-write lock ([`Client::rw_lock`]).
    Rw { name: String, hold: RwHold },
    /// Several locks as one ([`Client::multi_lock`]).
    Multi { names: Vec<String> },
}

/// A hold of a read-write lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RwHold {
    Read,
    Write,
}

impl RwHold {
    /// `"read"` or `"write"`, as the hosts spell it.
    pub fn parse(text: &str) -> Result<RwHold, Error> {
        match text {
            "read" => Ok(RwHold::Read),
            "write" => Ok(RwHold::Write),
            other => Err(Error::InvalidArgument(format!(
                "a read-write lock's hold is 'read' or 'write', not {other:?}"
            ))),
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            RwHold::Read => "read",
            RwHold::Write => "write",
        }
    }
}

/// What to acquire and how: a primitive and its options, each with its default.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockSpec {
    pub primitive: Primitive,
    /// Time to live on the server, renewed every third of it while held
    /// ([`DEFAULT_LEASE`] unless set).
    pub lease: Duration,
    /// How long [`acquire`](Self::acquire) may wait; `None`: as long as it takes.
    pub wait: Option<Duration>,
    /// Stop renewing and release this long after acquiring.
    pub max_hold: Option<Duration>,
    /// Who acquires: acquires by the same owner are reentrant. `None`: an owner of its own.
    /// Not for semaphores (permits are never reentrant) or multi-locks.
    pub owner: Option<u64>,
    /// First come, first served (the default); see [`crate::LockBuilder::fair`].
    pub fair: bool,
    /// Redisson's lock layout for this lock (hosts: `compat="redisson"`); see
    /// [`crate::LockBuilder::redisson`]. Locks only.
    pub redisson: bool,
}

impl LockSpec {
    /// `primitive` with every option at its default.
    pub fn new(primitive: Primitive) -> Self {
        LockSpec {
            primitive,
            lease: DEFAULT_LEASE,
            wait: None,
            max_hold: None,
            owner: None,
            fair: true,
            redisson: false,
        }
    }

    /// Sets [`redisson`](Self::redisson) from a host's `compat` option: `"redisson"`, the one
    /// layout there is to be compatible with (as in a URL's `?compat=redisson`).
    pub fn compat(&mut self, compat: Option<&str>) -> Result<(), Error> {
        self.redisson = match compat {
            None => false,
            Some("redisson") => true,
            Some(other) => {
                return Err(Error::InvalidArgument(format!(
                    "compat takes one value, \"redisson\", not {other:?}"
                )));
            }
        };
        Ok(())
    }

    /// The lock, semaphore or read-write hold named `name`, as a host names it: `permits`
    /// for a semaphore's permit, `rw` (`"read"`/`"write"`) for a read-write lock's hold,
    /// neither for a lock.
    pub fn named(name: String, permits: Option<u32>, rw: Option<&str>) -> Result<Self, Error> {
        let primitive = match (permits, rw) {
            (None, None) => Primitive::Lock { name },
            (Some(permits), None) => Primitive::Semaphore { name, permits },
            (None, Some(rw)) => Primitive::Rw {
                name,
                hold: RwHold::parse(rw)?,
            },
            (Some(_), Some(_)) => {
                return Err(Error::InvalidArgument(
                    "a semaphore's permits and a read-write lock's hold exclude each other".into(),
                ));
            }
        };
        Ok(LockSpec::new(primitive))
    }

    /// What a host's lock object names: `name` as [`named`](Self::named) takes it, or
    /// `names`, a multi-lock (which takes neither `permits` nor `rw`). The bindings pass
    /// their lock objects' fields here.
    pub fn target(
        name: Option<String>,
        names: Option<Vec<String>>,
        permits: Option<u32>,
        rw: Option<&str>,
    ) -> Result<Self, Error> {
        match (name, names) {
            (Some(name), None) => Self::named(name, permits, rw),
            (None, Some(names)) if permits.is_none() && rw.is_none() => {
                Ok(LockSpec::new(Primitive::Multi { names }))
            }
            (None, Some(_)) => Err(Error::InvalidArgument(
                "a multi-lock takes neither permits nor a read-write hold".into(),
            )),
            _ => Err(Error::InvalidArgument("a name or names, not both".into())),
        }
    }

    /// Refuses options that do not apply to the primitive (the engine checks names, leases
    /// and permit ranges). [`acquire`](Self::acquire) checks too; call it to fail before
    /// connecting.
    pub fn check(&self) -> Result<(), Error> {
        match self.primitive {
            Primitive::Lock { .. } => Ok(()),
            _ if self.redisson => Err(Error::InvalidArgument(
                "compat=\"redisson\" is for locks: Redisson's semaphores and read-write locks are other layouts".into(),
            )),
            Primitive::Multi { .. } if !self.fair => Err(Error::InvalidArgument(
                "a multi-lock is fair: its locks are taken in one order, each first come, first served".into(),
            )),
            Primitive::Multi { .. } if self.owner.is_some() => Err(Error::InvalidArgument(
                "a multi-lock has no owner: it is not reentrant".into(),
            )),
            _ => Ok(()),
        }
    }

    /// Waits for it, up to [`wait`](Self::wait): a [`SharedGuard`], or
    /// [`Error::WaitTimedOut`] when the wait ran out (the one place where "no guard" becomes
    /// a timeout for the hosts).
    pub async fn acquire(&self, client: &Client) -> Result<SharedGuard, Error> {
        let guard = self.acquire_within(client, self.wait).await;
        guard.and_then(crate::client::or_timeout)
    }

    /// Takes it if it is free now; `None` if not.
    pub async fn try_acquire(&self, client: &Client) -> Result<Option<SharedGuard>, Error> {
        self.acquire_within(client, Some(Duration::ZERO)).await
    }

    async fn acquire_within(
        &self,
        client: &Client,
        wait: Option<Duration>,
    ) -> Result<Option<SharedGuard>, Error> {
        self.check()?;
        let lock = match &self.primitive {
            Primitive::Multi { names } => {
                let mut lock = client.multi_lock(names.iter().cloned()).lease(self.lease);
                if let Some(max_hold) = self.max_hold {
                    lock = lock.max_hold(max_hold);
                }
                return Ok(lock.acquire_within(wait).await?.map(Into::into));
            }
            // Permits are never reentrant: no owner.
            Primitive::Semaphore { name, permits } => client.semaphore(name.clone(), *permits),
            Primitive::Lock { name } => client.lock(name.clone()),
            Primitive::Rw {
                name,
                hold: RwHold::Read,
            } => client.rw_lock(name.clone()).read(),
            Primitive::Rw {
                name,
                hold: RwHold::Write,
            } => client.rw_lock(name.clone()).write(),
        };
        let mut lock = lock.lease(self.lease).fair(self.fair);
        if self.redisson {
            lock = lock.redisson();
        }
        if let Some(max_hold) = self.max_hold {
            lock = lock.max_hold(max_hold);
        }
        if let (Some(owner), false) = (
            self.owner,
            matches!(self.primitive, Primitive::Semaphore { .. }),
        ) {
            lock = lock.owner(owner);
        }
        Ok(lock.acquire_within(wait).await?.map(Into::into))
    }
}

/// A duration a host gives as a float of `unit`s (`"seconds"` in Python, `"milliseconds"` in
/// Node): negative, NaN, infinite or out-of-range values are refused here, before anything is
/// sent; zero and out-of-range leases by the engine.
pub fn duration(what: &str, value: f64, unit: Unit) -> Result<Duration, Error> {
    let bad = |why: String| Error::InvalidArgument(format!("{what} {why}"));
    if !value.is_finite() || value < 0.0 {
        return Err(bad(format!(
            "must be a finite number of {} >= 0, got {value}",
            unit.name()
        )));
    }
    Duration::try_from_secs_f64(value / unit.per_second()).map_err(|e| bad(format!(": {e}")))
}

/// The unit of a host's durations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    Seconds,
    Milliseconds,
}

impl Unit {
    fn name(self) -> &'static str {
        match self {
            Unit::Seconds => "seconds",
            Unit::Milliseconds => "milliseconds",
        }
    }

    fn per_second(self) -> f64 {
        match self {
            Unit::Seconds => 1.0,
            Unit::Milliseconds => 1e3,
        }
    }
}

/// A semaphore's number of permits from a host integer, as the engine takes it (the engine
/// checks the range, 1 to [`MAX_PERMITS`]).
pub fn permits(n: i128) -> Result<u32, Error> {
    u32::try_from(n).map_err(|_| {
        Error::InvalidArgument(format!(
            "a semaphore has 1 to {MAX_PERMITS} permits, not {n}"
        ))
    })
}

/// A fencing token from a host integer: tokens start at 1 and fit in 64 bits.
pub fn fencing_token(n: i128) -> Result<u64, Error> {
    u64::try_from(n).ok().filter(|n| *n >= 1).ok_or_else(|| {
        Error::InvalidArgument(format!(
            "a fencing token is an integer from 1 to 2^64 - 1, not {n}"
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every host moves the future of an acquire at least once (into a box, a task) before it
    /// runs, and a move is a copy. It once held a connect's future (over 5 KB, for the
    /// Redisson companion client that a lock connects on first use): two copies of that
    /// were an eighth of a Python acquire + release's instructions. A bound with room, not an
    /// exact size, since compilers differ.
    #[tokio::test]
    async fn the_futures_hosts_move_stay_small() {
        let client = Client::builder("memory://spec-sizes")
            .connect()
            .await
            .unwrap();
        let specs = [
            LockSpec::named("a".into(), None, None).unwrap(),
            LockSpec::named("a".into(), Some(2), None).unwrap(),
            LockSpec::named("a".into(), None, Some("read")).unwrap(),
            LockSpec::new(Primitive::Multi {
                names: vec!["a".into(), "b".into()],
            }),
        ];
        for spec in &specs {
            let acquire = spec.acquire(&client);
            let try_acquire = spec.try_acquire(&client);
            for size in [size_of_val(&acquire), size_of_val(&try_acquire)] {
                assert!(
                    size <= 2048,
                    "{:?}: a future of {size} bytes",
                    spec.primitive
                );
            }
        }
    }

    #[test]
    fn host_values_are_checked_once() {
        assert_eq!(
            duration("lease", 1.5, Unit::Seconds),
            Ok(Duration::from_millis(1500))
        );
        assert_eq!(
            duration("leaseMs", 1500.0, Unit::Milliseconds),
            Ok(Duration::from_millis(1500))
        );
        for bad in [-1.0, f64::NAN, f64::INFINITY, 1e300] {
            let e = duration("wait", bad, Unit::Seconds).unwrap_err();
            assert!(e.to_string().contains("wait"), "{e}");
        }
        assert_eq!(permits(4), Ok(4));
        for bad in [-1, i128::from(u64::MAX)] {
            assert!(permits(bad).is_err(), "{bad}");
        }
        assert_eq!(fencing_token(7), Ok(7));
        assert_eq!(fencing_token(u64::MAX.into()), Ok(u64::MAX));
        for bad in [0, -3, i128::from(u64::MAX) + 1] {
            assert!(fencing_token(bad).is_err(), "{bad}");
        }
        assert_eq!(RwHold::parse("read"), Ok(RwHold::Read));
        assert!(RwHold::parse("upgrade").is_err());
        assert!(LockSpec::named("a".into(), Some(2), Some("read")).is_err());
    }

    #[test]
    fn a_target_is_a_name_or_names() {
        let names = || Some(vec!["a".to_string(), "b".to_string()]);
        let semaphore = LockSpec::target(Some("s".into()), None, Some(2), None).unwrap();
        assert!(matches!(
            semaphore.primitive,
            Primitive::Semaphore { permits: 2, .. }
        ));
        let multi = LockSpec::target(None, names(), None, None).unwrap();
        assert!(matches!(multi.primitive, Primitive::Multi { names } if names.len() == 2));
        for bad in [
            LockSpec::target(None, None, None, None),
            LockSpec::target(Some("a".into()), names(), None, None),
            LockSpec::target(None, names(), Some(2), None),
            LockSpec::target(None, names(), None, Some("read")),
        ] {
            assert!(matches!(bad, Err(Error::InvalidArgument(_))), "{bad:?}");
        }
    }
}
