//! # dlock
//!
//! Distributed locks on Redis (one server, Cluster, Redlock), ZooKeeper and, in process,
//! `memory://` ([`BACKENDS`]), with fencing tokens, FIFO hand-off without polling, a
//! watchdog, and a signal when a lock is lost. The lock
//! semantics are `dlock-core`'s sans-IO engine, run here by a small tokio driver; Python,
//! Node and Wasm hosts run the same engine and interoperate on the same keys.
//!
//! ```no_run
//! # async fn example() -> Result<(), dlock::Error> {
//! use std::time::Duration;
//!
//! let client = dlock::Client::connect("redis://127.0.0.1:6379").await?;
//! let guard = client.lock("orders/42").lease(Duration::from_secs(10)).wait(Duration::from_secs(5)).acquire().await?;
//! let token = guard.fencing_token(); // hand it to the resource; it refuses smaller ones
//! tokio::select! {
//!     reason = guard.lost() => eprintln!("lock lost: {reason:?}"),
//!     () = tokio::time::sleep(Duration::from_secs(1)) => {} // the work
//! }
//! guard.release().await?;
//! # let _ = token;
//! # Ok(())
//! # }
//! ```

mod client;
mod driver;
mod election;
mod error;
mod fenced;
pub mod json;
mod machine;
#[cfg(feature = "metrics")]
pub mod metrics;
pub mod prometheus;
mod secret;
pub mod spec;
mod transport;

pub use client::{
    Client, ClientBuilder, DEFAULT_LEASE, Guard, LockBuilder, LostSignal, MultiGuard,
    MultiLockBuilder, RwLockBuilder, SharedGuard,
};
pub use dlock_core::Member;
pub use dlock_core::redis::FencedWrite;
pub use dlock_core::{BUCKETS, Histogram, Kind, Leader, LockStats, LockStatus, OTHER_NAMES, Stats};
pub use election::{Election, Leadership, Observer};
pub use error::{Error, ErrorCode, LostReason};
pub use fenced::{Placeholder, fenced_update_sql};
pub use machine::{Machine, MachineError, MachineFactory};
pub use secret::redact;
pub use spec::{LockSpec, Primitive, RwHold};
pub use transport::{BACKENDS, Scheme};

/// The function library a client loads on Redis 7 and later (`FUNCTION LOAD` takes it as it
/// is), for administrators who load it for users granted `fcall` but not `function|load`
/// (`dlock schema redis`; docs/PROTOCOL.md §6, §7).
pub fn redis_library() -> String {
    dlock_core::redis::library().source
}

/// The SQL backend's tables and functions for `dialect` (`postgres`, `mysql`) under
/// `table_prefix` (e.g. `dlock_`), as one script: what a client creates when it connects and
/// finds them missing, for teams that run their migrations themselves (`dlock schema`).
pub fn sql_schema(dialect: &str, table_prefix: &str) -> Result<String, Error> {
    use dlock_core::sql::{Dialect, SqlSettings};
    let dialect = Dialect::parse(dialect).ok_or_else(|| {
        let names: Vec<&str> = Dialect::ALL.iter().map(|d| d.name()).collect();
        Error::InvalidArgument(format!(
            "unknown SQL dialect {dialect:?} (use {})",
            names.join(", ")
        ))
    })?;
    let settings = SqlSettings {
        table_prefix: table_prefix.to_owned(),
        ..SqlSettings::new(dialect)
    };
    settings
        .check()
        .map_err(|e| Error::InvalidArgument(e.to_string()))?;
    // MySQL's procedures hold `;` inside: the script ends statements with `//` instead, as
    // the mysql and mariadb clients (and Flyway) read `DELIMITER`.
    let (head, end, tail) = match dialect {
        Dialect::Postgres => ("", ";", ""),
        Dialect::Mysql => ("DELIMITER //\n\n", "\n//", "\nDELIMITER ;\n"),
    };
    let statements: Vec<String> = settings
        .schema()
        .iter()
        .map(|s| format!("{}{end}\n", s.trim()))
        .collect();
    Ok(format!("{head}{}{tail}", statements.join("\n")))
}
