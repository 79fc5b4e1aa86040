//! `mysql://` and `mariadb://`: a pool of connections to one MySQL or MariaDB server (the
//! mysql_async driver's, reconnecting on its own). Each statement `CALL`s one procedure, which
//! runs its own short transaction; nothing pushes wake-ups, so this transport listens to
//! nothing and the engine's waiters look again (PROTOCOL.md §18).
//!
//! When the client connects it checks for the protocol's procedures and, if they are missing,
//! creates the tables and procedures under a named lock (`GET_LOCK`), so clients starting
//! together do not race their DDL.

use std::time::Duration;

use dlock_core::sql::{Dialect, Param, SqlOp, SqlSettings, SqlValue, Statement};
use dlock_core::{Reply, Response, TransportError};
use mysql_async::prelude::Queryable;
use mysql_async::{Conn, Opts, OptsBuilder, Pool, PoolConstraints, PoolOpts, Row, SslOpts, Value};

use super::Pending;
use super::ssl::{self, SslQuery};
use crate::{Error, redact};

/// A `mysql://` or `mariadb://` URL: the driver's settings, the table prefix, the poll
/// interval and TLS.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct MyUrl {
    /// The URL as the driver takes it (`mysql://`, without dlock's own parameters).
    url: String,
    pub(crate) settings: SqlSettings,
    /// TLS, verified: against this CA file (`sslrootcert`), or the system's roots.
    tls: Option<Option<String>>,
}

impl MyUrl {
    /// Parses `url` (`shown` is the URL as messages show it): dlock takes `table_prefix`,
    /// `poll_interval_ms`, `sslmode` and `sslrootcert` from the query; the rest goes to the
    /// driver, but for its own TLS switches (one way to ask for TLS, as on PostgreSQL).
    pub(crate) fn parse(shown: &str, url: &str) -> Result<MyUrl, Error> {
        let bad = |why: String| Error::InvalidUrl(format!("{shown:?}{why}"));
        let rest = url.split_once("://").map_or("", |(_, rest)| rest);
        let (base, query) = rest.split_once('?').unwrap_or((rest, ""));
        let mut settings = SqlSettings::new(Dialect::Mysql);
        let mut ssl = SslQuery::default();
        let mut kept = Vec::new();
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            match pair.split_once('=') {
                Some(("table_prefix", prefix)) => prefix.clone_into(&mut settings.table_prefix),
                Some(("poll_interval_ms", ms)) => {
                    let ms: u64 = ms
                        .parse()
                        .map_err(|_| bad(format!(": poll_interval_ms={ms:?} is not a number")))?;
                    settings.poll_interval = Duration::from_millis(ms);
                }
                Some((key, value)) if ssl.take(key, value).map_err(bad)? => {}
                Some((
                    key @ ("require_ssl" | "verify_ca" | "verify_identity" | "built_in_roots"),
                    _,
                )) => {
                    return Err(bad(format!(
                        ": {key} is the driver's; ask for TLS with sslmode=require (and sslrootcert=CA file)"
                    )));
                }
                _ => kept.push(pair),
            }
        }
        let tls = ssl.finish().map_err(bad)?;
        settings.check().map_err(|e| bad(format!(": {e}")))?;
        let url = if kept.is_empty() {
            format!("mysql://{base}")
        } else {
            format!("mysql://{base}?{}", kept.join("&"))
        };
        let opts =
            Opts::from_url(&url).map_err(|e| bad(format!(": {}", redact(&e.to_string()))))?;
        if base.is_empty() || base.starts_with(['/', ':']) {
            return Err(bad(" names no host".into()));
        }
        if opts.db_name().is_none() {
            return Err(bad(" names no database (mysql://host:port/database)".into()));
        }
        Ok(MyUrl { url, settings, tls })
    }

    /// The URL as logs and `Debug` show it (no password).
    pub(crate) fn shown(&self) -> String {
        redact(&self.url)
    }

    fn opts(&self) -> Result<Opts, String> {
        let opts = Opts::from_url(&self.url).expect("checked by parse");
        let tls = match &self.tls {
            None => None,
            Some(root) => {
                let roots = ssl::roots(root.as_deref())?;
                if roots.is_empty() {
                    return Err("no root certificate in the system's store".into());
                }
                let roots = roots.into_iter().map(|cert| cert.to_vec().into());
                Some(
                    SslOpts::default()
                        .with_root_certs(roots.collect())
                        .with_disable_built_in_roots(true),
                )
            }
        };
        Ok(OptsBuilder::from_opts(opts)
            .ssl_opts(tls)
            .pool_opts(
                PoolOpts::default()
                    .with_constraints(PoolConstraints::new(1, 32).expect("1 <= 32"))
                    // Idle connections stay in the pool (up to 32) until they have been idle
                    // this long. With the driver's default of none, the pool kept one and
                    // closed every other connection as it came back: statements that
                    // overlapped opened a connection each (TCP, login, the switch to the
                    // server's socket): a client of 8 busy tasks, a connection per statement.
                    .with_inactive_connection_ttl(IDLE_CONNECTION_TTL)
                    // The statements leave no session state to reset (§18), and a reset on
                    // every return to the pool costs a round trip and the prepared statements:
                    // it tripled an uncontended acquire + release.
                    .with_reset_connection(false),
            )
            .into())
    }
}

#[derive(Clone)]
pub(crate) struct MyTransport {
    pool: Pool,
}

impl std::fmt::Debug for MyTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MyTransport").finish_non_exhaustive()
    }
}

/// How long a connection may sit idle in the pool beyond its first (checked every 30 s, the
/// driver's `ttl_check_interval`) before it is closed.
const IDLE_CONNECTION_TTL: Duration = Duration::from_secs(60);

/// How often a statement that failed on a deadlock or a serialization failure (it was rolled
/// back) is run again before the failure is the reply.
const RETRIES: usize = 5;

impl MyTransport {
    /// Opens the pool's first connection and creates the schema if it is missing.
    pub(crate) async fn connect(url: &MyUrl) -> Result<Self, Error> {
        let opts = url
            .opts()
            .map_err(|e| Error::Connect(format!("{}: {e}", url.shown())))?;
        let pool = Pool::new(opts);
        let fail = |e: mysql_async::Error| {
            Error::Connect(redact(&format!("{}: {}", url.shown(), error_text(&e))))
        };
        let mut conn = pool.get_conn().await.map_err(fail)?;
        if let Err(e) = ensure_schema(&mut conn, &url.settings).await {
            drop(conn);
            let _ = pool.disconnect().await;
            return Err(Error::Connect(redact(&format!(
                "{}: creating dlock's tables and procedures: {}",
                url.shown(),
                error_text(&e)
            ))));
        }
        Ok(Self { pool })
    }

    pub(crate) fn execute(&self, op: SqlOp) -> Pending {
        let pool = self.pool.clone();
        Box::pin(async move {
            match op {
                SqlOp::Query {
                    statement,
                    sql,
                    params,
                } => query(&pool, statement, sql, params).await,
                SqlOp::Listen { .. } => Err(TransportError::Server(
                    "MySQL has no LISTEN: its waiters look again".into(),
                )),
            }
        })
    }

    pub(crate) fn close(&self) {
        let pool = self.pool.clone();
        tokio::spawn(async move {
            let _ = pool.disconnect().await;
        });
    }
}

/// Runs one `CALL` and reads the row it selects.
async fn query(pool: &Pool, statement: Statement, sql: String, params: Vec<Param>) -> Reply {
    let values: Vec<Value> = params
        .into_iter()
        .map(|p| match p {
            Param::Text(s) => Value::Bytes(s.into_bytes()),
            Param::Int(n) => Value::Int(n),
            other => unreachable!("MySQL statements take no {other:?}"),
        })
        .collect();
    let mut tries = 0;
    let row = loop {
        let mut conn = pool.get_conn().await.map_err(transport_error)?;
        match conn
            .exec_first::<Row, _, _>(sql.as_str(), values.clone())
            .await
        {
            Ok(row) => break row,
            Err(e) if tries < RETRIES && retryable(&e) => tries += 1,
            Err(e) => return Err(transport_error(e)),
        }
    };
    let Some(row) = row else {
        return Ok(Response::Sql(Vec::new()));
    };
    let values = row
        .unwrap()
        .into_iter()
        .map(|v| match v {
            Value::NULL => SqlValue::Null,
            Value::Int(n) => SqlValue::Int(n),
            Value::UInt(n) => {
                i64::try_from(n).map_or_else(|_| SqlValue::Text(n.to_string()), SqlValue::Int)
            }
            Value::Bytes(b) => {
                let text = String::from_utf8_lossy(&b).into_owned();
                match text.parse::<i64>() {
                    Ok(n) if !statement.replies_text() => SqlValue::Int(n),
                    _ => SqlValue::Text(text),
                }
            }
            other => SqlValue::Text(format!("{other:?}")),
        })
        .collect();
    Ok(Response::Sql(values))
}

/// A deadlock (1213) or serialization failure (SQLSTATE 40001): rolled back, can run again.
fn retryable(e: &mysql_async::Error) -> bool {
    matches!(e, mysql_async::Error::Server(s) if s.code == 1213 || s.state == "40001")
}

/// The driver's error with the server's code and message, when it has them.
fn error_text(e: &mysql_async::Error) -> String {
    match e {
        mysql_async::Error::Server(s) => {
            format!("{} (error {}, SQLSTATE {})", s.message, s.code, s.state)
        }
        other => other.to_string(),
    }
}

fn transport_error(e: mysql_async::Error) -> TransportError {
    match e {
        mysql_async::Error::Server(_) => TransportError::Server(error_text(&e)),
        other => TransportError::Unavailable(error_text(&other)),
    }
}

/// Creates the tables and procedures unless the protocol's procedures are there: under the
/// named lock `dlock schema`, so that clients starting together run the DDL one at a time.
async fn ensure_schema(conn: &mut Conn, settings: &SqlSettings) -> Result<(), mysql_async::Error> {
    let probe = settings.probe_function();
    if schema_present(conn, &probe).await? {
        return Ok(());
    }
    let locked: Option<i64> = conn
        .query_first("SELECT GET_LOCK('dlock schema', 60)")
        .await?;
    if locked != Some(1) {
        return Err(mysql_async::Error::Other(
            "no turn to create the schema within 60 s (GET_LOCK)".into(),
        ));
    }
    let mut created = Ok(());
    if !schema_present(conn, &probe).await? {
        for statement in settings.schema() {
            created = conn.query_drop(statement).await;
            if created.is_err() {
                break;
            }
        }
    }
    conn.query_drop("SELECT RELEASE_LOCK('dlock schema')")
        .await?;
    created
}

/// Whether the procedure `probe` exists in the current database (and so the schema).
async fn schema_present(conn: &mut Conn, probe: &str) -> Result<bool, mysql_async::Error> {
    let count: Option<i64> = conn
        .exec_first(
            "SELECT COUNT(*) FROM information_schema.ROUTINES WHERE ROUTINE_SCHEMA = DATABASE() AND ROUTINE_NAME = ?",
            (probe,),
        )
        .await?;
    Ok(count == Some(1))
}
