//! Planted bugs: each one a small, realistic mistake in the engine or in a reference server,
//! kept here so that `just plants` can switch it on and require the checks that SAFETY.md
//! credits (the simulation's invariants, the differential test) to catch it.
//!
//! Without the `plants` feature, `plant::on` is a constant `false` and every planted branch
//! compiles away: no build a user gets can switch one on. With it (`cargo test -p dlock-core
//! --features plants`), `set` picks at most one for the whole process, and the simulation,
//! the differential test and the model checker read `DLOCK_PLANT` (`set_from_env`).

/// One planted bug. Its [`name`](Plant::name) is what `DLOCK_PLANT` takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Plant {
    /// A Redis acquire's validity is counted from its reply instead of its send.
    ValidityFromReply,
    /// A Redis renewal's validity is counted from its reply instead of its send.
    RenewalFromReply,
    /// A ZooKeeper session confirmation counts from the reply instead of the send.
    ZkValidityFromReply,
    /// ZooKeeper validity without the drift allowance.
    ZkNoDrift,
    /// The drift allowance halved: 0.5% of the lease + 2 ms.
    DriftHalved,
    /// No drift allowance anywhere.
    NoDrift,
    /// `Lost` is told half a lease after the validity ran out.
    LostLate,
    /// A hand-off notice older than the waiter's latest answered ACQUIRE is trusted.
    StaleWakeUpTrusted,
    /// The reference Redis gives fencing tokens from `INCR` alone, without the time floor.
    NoTimeFloor,
    /// The reference Redis hands a released lock over for the waiter lease + 30 s.
    LongHandOff,
    /// RELEASE's Lua publishes the fencing token − 1 in its hand-off wake-up (in the function
    /// library, where the hand-off helper is shared, every function's that hands off).
    ReleaseTokenMinusOne,
    /// A ZooKeeper confirmation proves 1.5 session timeouts instead of one.
    ZkLongValidity,
    /// A ZooKeeper reader counts no node ahead of it, writers' included.
    ZkReadersIgnoreWriters,
    /// A ZooKeeper lock directory is used without its persistent pin child.
    ZkNoPin,
    /// A ZooKeeper semaphore's gate holder does not count its own lease node.
    ZkLeaseUncounted,
    /// The reference Redis's REDISSON-ACQUIRE resets the TTL of a lock its field holds
    /// already (Redisson's own reentry does) instead of only stretching it.
    RedissonReacquireShrinks,
    /// Redlock's token is the smallest counter of the granting majority, not the largest.
    RedlockSmallestCounter,
    /// The reference Redis grants a write hold beside live readers.
    WriteBesideReaders,
    /// The reference Redis grants any owner's read beside a writer, not only the writer's own.
    DowngradeForAnyone,
    /// The reference Redis grants a permit when none is free.
    PermitWhenNoneFree,
    /// The reference SQL database grants a lock beside its live holder.
    SqlGrantBesideHolder,
    /// The reference servers' PROCLAIM (Redis's, SQL's) checks the owner token but not the
    /// term.
    ProclaimAnyTerm,
    /// An election observer forgets the highest term it reported once it reports the lock
    /// free.
    ObserverForgetsTerm,
}

impl Plant {
    /// Every planted bug, in the order `just plants` runs them.
    pub const ALL: [Plant; 23] = [
        Plant::ValidityFromReply,
        Plant::RenewalFromReply,
        Plant::ZkValidityFromReply,
        Plant::ZkNoDrift,
        Plant::DriftHalved,
        Plant::NoDrift,
        Plant::LostLate,
        Plant::StaleWakeUpTrusted,
        Plant::NoTimeFloor,
        Plant::LongHandOff,
        Plant::ReleaseTokenMinusOne,
        Plant::ZkLongValidity,
        Plant::ZkReadersIgnoreWriters,
        Plant::ZkNoPin,
        Plant::ZkLeaseUncounted,
        Plant::RedissonReacquireShrinks,
        Plant::RedlockSmallestCounter,
        Plant::WriteBesideReaders,
        Plant::DowngradeForAnyone,
        Plant::PermitWhenNoneFree,
        Plant::SqlGrantBesideHolder,
        Plant::ProclaimAnyTerm,
        Plant::ObserverForgetsTerm,
    ];

    /// Its name in `DLOCK_PLANT` and in `just plants`.
    pub fn name(self) -> &'static str {
        match self {
            Plant::ValidityFromReply => "validity-from-reply",
            Plant::RenewalFromReply => "renewal-from-reply",
            Plant::ZkValidityFromReply => "zk-validity-from-reply",
            Plant::ZkNoDrift => "zk-no-drift",
            Plant::DriftHalved => "drift-halved",
            Plant::NoDrift => "no-drift",
            Plant::LostLate => "lost-late",
            Plant::StaleWakeUpTrusted => "stale-wake-up-trusted",
            Plant::NoTimeFloor => "no-time-floor",
            Plant::LongHandOff => "long-hand-off",
            Plant::ReleaseTokenMinusOne => "release-token-minus-one",
            Plant::ZkLongValidity => "zk-long-validity",
            Plant::ZkReadersIgnoreWriters => "zk-readers-ignore-writers",
            Plant::ZkNoPin => "zk-no-pin",
            Plant::ZkLeaseUncounted => "zk-lease-uncounted",
            Plant::RedissonReacquireShrinks => "redisson-reacquire-shrinks",
            Plant::RedlockSmallestCounter => "redlock-smallest-counter",
            Plant::WriteBesideReaders => "write-beside-readers",
            Plant::DowngradeForAnyone => "downgrade-for-anyone",
            Plant::PermitWhenNoneFree => "permit-when-none-free",
            Plant::SqlGrantBesideHolder => "sql-grant-beside-holder",
            Plant::ProclaimAnyTerm => "proclaim-any-term",
            Plant::ObserverForgetsTerm => "observer-forgets-term",
        }
    }

    /// What catches it: `simulation` (core/tests/simulation.rs, on the reference servers) or
    /// `differential` (core/tests/differential.rs, a Lua script against redis-server).
    pub fn caught_by(self) -> &'static str {
        match self {
            Plant::ReleaseTokenMinusOne => "differential",
            _ => "simulation",
        }
    }

    /// The plant of that name.
    pub fn named(name: &str) -> Option<Plant> {
        Plant::ALL.into_iter().find(|p| p.name() == name)
    }
}

/// The plants `check` (`simulation` or `differential`) is credited with catching.
pub fn credited_to(check: &str) -> impl Iterator<Item = Plant> + '_ {
    Plant::ALL
        .into_iter()
        .filter(move |p| p.caught_by() == check)
}

#[cfg(feature = "plants")]
static ACTIVE: core::sync::atomic::AtomicUsize = core::sync::atomic::AtomicUsize::new(0);

/// Switches `plant` on (or every plant off) for the whole process.
#[cfg(feature = "plants")]
pub fn set(plant: Option<Plant>) {
    let index = plant.map_or(0, |p| p as usize + 1);
    ACTIVE.store(index, core::sync::atomic::Ordering::Relaxed);
}

/// Switches on the plant that the environment variable `DLOCK_PLANT` names, if it is set: how
/// a test replays the seed or the path that caught one. Panics on a name that is no plant.
#[cfg(feature = "plants")]
pub fn set_from_env() {
    if let Ok(name) = std::env::var("DLOCK_PLANT") {
        let plant = Plant::named(&name)
            .unwrap_or_else(|| panic!("DLOCK_PLANT={name} names no plant (core/src/plant.rs)"));
        set(Some(plant));
    }
}

/// Whether `plant` is switched on: always false without the `plants` feature.
#[inline(always)]
pub(crate) fn on(plant: Plant) -> bool {
    #[cfg(feature = "plants")]
    {
        ACTIVE.load(core::sync::atomic::Ordering::Relaxed) == plant as usize + 1
    }
    #[cfg(not(feature = "plants"))]
    {
        let _ = plant;
        false
    }
}
