//! `postgres://`: two self-reconnecting connections to one PostgreSQL server — one runs the
//! engine's statements (pipelined, each one round trip with its parameter types given, so no
//! prepared statement or other session state is kept), the other `LISTEN`s for wake-ups.
//! The statements work through a transaction-pooling proxy; the `LISTEN` connection needs a
//! session of its own (PROTOCOL.md §18).
//!
//! When the client connects it checks for the protocol's functions and, if they are missing,
//! creates the tables and functions under an advisory lock, so clients starting together do
//! not race their DDL.
//!
//! TLS: `sslmode=require`, `verify-ca` or `verify-full` connect with rustls and verify the
//! server's certificate and name against the system's roots (or `SSL_CERT_FILE`), or against
//! the CA file `sslrootcert=` names — stricter than libpq's `require`, which checks nothing.
//! Without one of them (`disable`, `prefer`, the default) the connections are plain TCP.

use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dlock_core::sql::{Param, ParamType, SqlOp, SqlSettings, SqlValue, Statement};
use dlock_core::{Notice, Reply, Response, TransportError};
use futures_util::{Stream, StreamExt};
use tokio_postgres::error::SqlState;
use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::{AsyncMessage, Client, NoTls};
use tokio_postgres_rustls::MakeRustlsConnect;

use super::Pending;
use super::ssl::{self, SslQuery};
use crate::driver::Inbox;
use crate::{Error, redact};

/// A `postgres://` or `postgresql://` URL: the driver's settings, the table prefix and TLS.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct PgUrl {
    /// The URL without dlock's own parameters, for the driver.
    url: String,
    pub(crate) settings: SqlSettings,
    /// TLS, verified: against this CA file (`sslrootcert`), or the system's roots.
    tls: Option<Option<String>>,
}

impl PgUrl {
    /// Parses `url` (`shown` is the URL as messages show it): dlock takes `table_prefix`,
    /// `sslmode` and `sslrootcert` from the query; everything else goes to the driver, which
    /// knows `user`, `password`, `host`, `port`, `dbname`, `connect_timeout`,
    /// `application_name`, …
    pub(crate) fn parse(shown: &str, url: &str) -> Result<PgUrl, Error> {
        let bad = |why: String| Error::InvalidUrl(format!("{shown:?}{why}"));
        let (base, query) = url.split_once('?').unwrap_or((url, ""));
        let mut settings = SqlSettings::new(dlock_core::sql::Dialect::Postgres);
        let mut rest = Vec::new();
        let mut ssl = SslQuery::default();
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            match pair.split_once('=') {
                Some(("table_prefix", prefix)) => prefix.clone_into(&mut settings.table_prefix),
                Some((key, value)) if ssl.take(key, value).map_err(bad)? => {}
                _ => rest.push(pair),
            }
        }
        let tls = ssl.finish().map_err(bad)?;
        settings.check().map_err(|e| bad(format!(": {e}")))?;
        let url = if rest.is_empty() {
            base.to_owned()
        } else {
            format!("{base}?{}", rest.join("&"))
        };
        let config: tokio_postgres::Config = url
            .parse()
            .map_err(|e: tokio_postgres::Error| bad(format!(": {}", redact(&e.to_string()))))?;
        if config.get_hosts().is_empty() {
            return Err(bad(" names no host".into()));
        }
        Ok(PgUrl { url, settings, tls })
    }

    /// What the connections are made with: plain TCP, or rustls verifying the server.
    fn connector(&self) -> Result<Connector, String> {
        let Some(root) = &self.tls else {
            return Ok(Connector::Plain);
        };
        let config = ssl::client_config(root.as_deref())?;
        Ok(Connector::Rustls(MakeRustlsConnect::new(config)))
    }

    /// `postgres://host:port/db`, as logs and `Debug` show it (no user or password).
    pub(crate) fn shown(&self) -> String {
        redact(&self.url)
    }

    fn config(&self) -> tokio_postgres::Config {
        let mut config: tokio_postgres::Config = self.url.parse().expect("checked by parse");
        if self.tls.is_some() {
            config.ssl_mode(tokio_postgres::config::SslMode::Require);
        }
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(Duration::from_secs(5));
        }
        if config.get_application_name().is_none() {
            config.application_name("dlock");
        }
        config
    }
}

/// How connections are made.
#[derive(Clone)]
enum Connector {
    Plain,
    Rustls(MakeRustlsConnect),
}

/// What drives a connection: its messages (notifications), until it ends.
type Messages = Pin<Box<dyn Stream<Item = Result<AsyncMessage, tokio_postgres::Error>> + Send>>;

impl Connector {
    /// Opens one connection: its client, and the stream that drives it.
    async fn open(
        &self,
        config: &tokio_postgres::Config,
    ) -> Result<(Client, Messages), tokio_postgres::Error> {
        Ok(match self {
            Connector::Plain => {
                let (client, mut connection) = config.connect(NoTls).await?;
                let messages = futures_util::stream::poll_fn(move |cx| connection.poll_message(cx));
                (client, Box::pin(messages))
            }
            Connector::Rustls(tls) => {
                let (client, mut connection) = config.connect(tls.clone()).await?;
                let messages = futures_util::stream::poll_fn(move |cx| connection.poll_message(cx));
                (client, Box::pin(messages))
            }
        })
    }
}

/// One connection, reconnected in the background when it breaks.
struct Link {
    client: Mutex<Option<Arc<Client>>>,
}

impl Link {
    fn get(&self) -> Option<Arc<Client>> {
        self.client.lock().expect("link").clone()
    }

    fn set(&self, client: Option<Arc<Client>>) {
        *self.client.lock().expect("link") = client;
    }
}

#[derive(Clone)]
pub(crate) struct PgTransport {
    statements: Arc<Link>,
    listen: Arc<Link>,
    tasks: Arc<Vec<tokio::task::AbortHandle>>,
}

impl std::fmt::Debug for PgTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgTransport").finish_non_exhaustive()
    }
}

/// What a broken connection is to the engine.
fn unavailable(what: &str) -> TransportError {
    TransportError::Unavailable(format!("PostgreSQL {what} connection is down"))
}

impl PgTransport {
    /// Connects both connections, creates the schema if it is missing, and returns once both
    /// are up; after that, each is reconnected in the background whenever it breaks (the
    /// `LISTEN` one then reports [`Notice::Connected`], so the engine listens again).
    pub(crate) async fn connect(url: &PgUrl, inbox: Inbox) -> Result<Self, Error> {
        let fail = |e: tokio_postgres::Error| {
            Error::Connect(redact(&format!("{}: {}", url.shown(), error_text(&e))))
        };
        let config = url.config();
        let connector = url
            .connector()
            .map_err(|e| Error::Connect(redact(&format!("{}: TLS: {e}", url.shown()))))?;
        let (client, messages) = connector.open(&config).await.map_err(fail)?;
        let statements = Arc::new(Link {
            client: Mutex::new(Some(Arc::new(client))),
        });
        let first = tokio::spawn(forward(messages, None));
        let client = statements.get().expect("just connected");
        ensure_schema(&client, &url.settings).await.map_err(|e| {
            first.abort();
            Error::Connect(redact(&format!(
                "{}: creating dlock's tables and functions: {}",
                url.shown(),
                error_text(&e)
            )))
        })?;

        let (listen_client, messages) = connector.open(&config).await.map_err(fail)?;
        let listen = Arc::new(Link {
            client: Mutex::new(Some(Arc::new(listen_client))),
        });
        let first_listen = tokio::spawn(forward(messages, Some(inbox.clone())));

        let tasks = vec![
            tokio::spawn(supervise(
                config.clone(),
                connector.clone(),
                statements.clone(),
                first,
                None,
            ))
            .abort_handle(),
            tokio::spawn(supervise(
                config,
                connector,
                listen.clone(),
                first_listen,
                Some(inbox),
            ))
            .abort_handle(),
        ];
        Ok(Self {
            statements,
            listen,
            tasks: Arc::new(tasks),
        })
    }

    pub(crate) fn execute(&self, op: SqlOp) -> Pending {
        match op {
            SqlOp::Query {
                statement,
                sql,
                params,
            } => {
                let client = self.statements.get();
                Box::pin(async move {
                    let client = client.ok_or_else(|| unavailable("statement"))?;
                    query(&client, statement, &sql, &params).await
                })
            }
            SqlOp::Listen { channel } => {
                let client = self.listen.get();
                Box::pin(async move {
                    let client = client.ok_or_else(|| unavailable("LISTEN"))?;
                    let sql = format!("LISTEN \"{}\"", channel.replace('"', "\"\""));
                    client.batch_execute(&sql).await.map_err(transport_error)?;
                    Ok(Response::Sql(Vec::new()))
                })
            }
        }
    }

    pub(crate) fn close(&self) {
        for task in self.tasks.iter() {
            task.abort();
        }
        self.statements.set(None);
        self.listen.set(None);
    }
}

/// Keeps `link` connected: waits for its connection (`running`) to end, then connects again
/// with a growing back-off. A `LISTEN` link (`inbox`) forwards notifications and reports the
/// connection's loss and return.
async fn supervise(
    config: tokio_postgres::Config,
    connector: Connector,
    link: Arc<Link>,
    mut running: tokio::task::JoinHandle<()>,
    inbox: Option<Inbox>,
) {
    loop {
        let _ = (&mut running).await;
        link.set(None);
        if let Some(inbox) = &inbox {
            inbox.send(Notice::Disconnected);
        }
        let mut backoff = Duration::from_millis(50);
        let (client, messages) = loop {
            match connector.open(&config).await {
                Ok(pair) => break pair,
                Err(e) => {
                    tracing::debug!(error = %error_text(&e), "PostgreSQL reconnect failed");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(2));
                }
            }
        };
        link.set(Some(Arc::new(client)));
        running = tokio::spawn(forward(messages, inbox.clone()));
        if let Some(inbox) = &inbox {
            inbox.send(Notice::Connected);
        }
    }
}

/// Drives a connection until it ends, passing its notifications to the engine (a `LISTEN`
/// connection's `inbox`).
async fn forward(mut messages: Messages, inbox: Option<Inbox>) {
    while let Some(Ok(message)) = messages.next().await {
        if let (AsyncMessage::Notification(n), Some(inbox)) = (message, &inbox) {
            let notice = Notice::Message {
                channel: n.channel().to_owned(),
                payload: n.payload().as_bytes().to_vec(),
            };
            if !inbox.send(notice) {
                return;
            }
        }
    }
}

/// How often a statement that failed on a serialization failure or a deadlock (it had no
/// effect) is run again before the failure is the reply.
const RETRIES: usize = 5;

/// Runs one statement and reads the array it selects.
async fn query(client: &Client, statement: Statement, sql: &str, params: &[Param]) -> Reply {
    let values: Vec<Box<dyn ToSql + Sync + Send>> = params
        .iter()
        .map(|p| -> Box<dyn ToSql + Sync + Send> {
            match p {
                Param::Text(s) => Box::new(s.clone()),
                Param::Int(n) => Box::new(*n),
                Param::TextList(items) => Box::new(items.clone()),
                Param::IntList(items) => Box::new(items.clone()),
            }
        })
        .collect();
    let typed: Vec<(&(dyn ToSql + Sync), Type)> = values
        .iter()
        .zip(params)
        .map(|(v, p)| {
            let ty = match p.kind() {
                ParamType::Text => Type::TEXT,
                ParamType::Int => Type::INT8,
                ParamType::TextList => Type::TEXT_ARRAY,
                ParamType::IntList => Type::INT8_ARRAY,
            };
            (&**v as &(dyn ToSql + Sync), ty)
        })
        .collect();
    let mut tries = 0;
    let rows = loop {
        match client.query_typed(sql, &typed).await {
            Ok(rows) => break rows,
            Err(e) if tries < RETRIES && retryable(&e) => tries += 1,
            Err(e) => return Err(transport_error(e)),
        }
    };
    let Some(row) = rows.first() else {
        return Ok(Response::Sql(Vec::new()));
    };
    let values = match statement.replies_text() {
        true => row
            .try_get::<_, Option<Vec<Option<String>>>>(0)
            .map_err(transport_error)?
            .unwrap_or_default()
            .into_iter()
            .map(|v| v.map_or(SqlValue::Null, SqlValue::Text))
            .collect(),
        false => row
            .try_get::<_, Option<Vec<Option<i64>>>>(0)
            .map_err(transport_error)?
            .unwrap_or_default()
            .into_iter()
            .map(|v| v.map_or(SqlValue::Null, SqlValue::Int))
            .collect(),
    };
    Ok(Response::Sql(values))
}

/// A serialization failure or a deadlock: the statement was rolled back and can run again.
fn retryable(e: &tokio_postgres::Error) -> bool {
    matches!(
        e.code(),
        Some(c) if *c == SqlState::T_R_SERIALIZATION_FAILURE || *c == SqlState::T_R_DEADLOCK_DETECTED
    )
}

/// The driver's error with the server's message and SQLSTATE, when it has them, else with
/// its causes (a TLS handshake names the certificate it refused).
fn error_text(e: &tokio_postgres::Error) -> String {
    if let Some(db) = e.as_db_error() {
        return format!("{} (SQLSTATE {})", db.message(), db.code().code());
    }
    let mut text = e.to_string();
    let mut cause = std::error::Error::source(e);
    while let Some(c) = cause {
        text += &format!(": {c}");
        cause = c.source();
    }
    text
}

fn transport_error(e: tokio_postgres::Error) -> TransportError {
    if e.as_db_error().is_some() {
        TransportError::Server(error_text(&e))
    } else {
        TransportError::Unavailable(error_text(&e))
    }
}

/// Creates the tables and functions unless the protocol's functions are there: under a
/// transaction-scoped advisory lock, so that clients starting together run the DDL one at a
/// time (PostgreSQL's `IF NOT EXISTS` is not safe against a concurrent create).
async fn ensure_schema(
    client: &Client,
    settings: &SqlSettings,
) -> Result<(), tokio_postgres::Error> {
    let probe = settings.probe_function();
    if schema_present(client, &probe).await? {
        return Ok(());
    }
    client.batch_execute("BEGIN").await?;
    let created = async {
        client
            .execute(
                "SELECT pg_advisory_xact_lock(hashtext('dlock schema'))",
                &[],
            )
            .await?;
        if !schema_present(client, &probe).await? {
            for statement in settings.schema() {
                client.batch_execute(&statement).await?;
            }
        }
        client.batch_execute("COMMIT").await
    };
    match created.await {
        Ok(()) => Ok(()),
        Err(e) => {
            let _ = client.batch_execute("ROLLBACK").await;
            Err(e)
        }
    }
}

/// Whether the function `probe` exists (and so the schema).
async fn schema_present(client: &Client, probe: &str) -> Result<bool, tokio_postgres::Error> {
    let row = client
        .query_one("SELECT to_regproc($1::text) IS NOT NULL", &[&probe])
        .await?;
    row.try_get::<_, bool>(0)
}
