//! The SQL protocol, v1: tables, functions and the statements that call them, for PostgreSQL
//! and for MySQL/MariaDB.
//!
//! The SQL backend runs the queue protocol of one Redis (§5) with the database as the server:
//! each Lua script of a lock, a semaphore or a read-write lock ([`Script::Acquire`],
//! [`Script::PermitAcquire`], [`Script::RwAcquire`], …; [`Statement`] lists them) is a
//! function of the same name in the database,
//! which takes the lock's name where the script takes its keys, the same arguments, and
//! replies the same integers. So the engine's lock machine is the Redis one
//! (`redis::machine`), carried by [`SqlOp`]s instead of `EVALSHA`, and woken by `NOTIFY`
//! instead of `PUBLISH` on PostgreSQL; MySQL has no push channel, and its waiters look again
//! every [`SqlSettings::poll_interval`] (jittered). `docs/PROTOCOL.md` §18 gives the tables
//! and the argument.
//!
//! Every statement is one call of one function or procedure: one round trip, atomic (one
//! autocommitted `SELECT`, or a procedure's own short transaction), relying on no session
//! state but the wake-up channel's `LISTEN`. A serialization failure or deadlock is retried
//! by the transport: the statement had no effect. Transports run [`SqlOp`]s verbatim.

use core::time::Duration;

use crate::error::Error;
use crate::redis::machine::{LeaderNews, Wire};
use crate::redis::{RedisOp, Script, Value, Words};
use crate::status::LockStatus;
use crate::types::{Op, Primitive, Response};
pub mod reference;

use core::fmt;

/// Version of the tables and functions in this module: the functions' names end in `_v1`, so
/// clients of another version never run these by mistake.
pub const SQL_PROTOCOL_VERSION: u32 = 1;

/// The table prefix unless configured otherwise: tables `dlock_lock`, `dlock_waiter`, the
/// sequence `dlock_fence`, functions `dlock_acquire_v1`, …
pub const DEFAULT_TABLE_PREFIX: &str = "dlock_";

/// Longest table prefix: the longest name made of it (`<prefix>waiter_queue`) stays within
/// PostgreSQL's 63 bytes.
pub const MAX_TABLE_PREFIX_LEN: usize = 40;

/// Which database speaks the protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Dialect {
    /// PostgreSQL 12 or later: functions, `NOTIFY` wake-ups.
    Postgres,
    /// MariaDB 10.6 or later, MySQL 8: procedures, waiters that look again.
    Mysql,
}

impl Dialect {
    /// Every dialect, in the order the docs list them.
    pub const ALL: [Dialect; 2] = [Dialect::Postgres, Dialect::Mysql];

    /// The dialect's name in URLs, the CLI and errors: `postgres`, `mysql`.
    pub fn name(self) -> &'static str {
        match self {
            Dialect::Postgres => "postgres",
            Dialect::Mysql => "mysql",
        }
    }

    /// The dialect named `name` (`postgres` or `postgresql`; `mysql` or `mariadb`).
    pub fn parse(name: &str) -> Option<Dialect> {
        match name {
            "postgres" | "postgresql" => Some(Dialect::Postgres),
            "mysql" | "mariadb" => Some(Dialect::Mysql),
            _ => None,
        }
    }

    /// Whether the database pushes wake-ups (`NOTIFY`); otherwise waiters look again.
    pub fn pushes(self) -> bool {
        self == Dialect::Postgres
    }
}

impl fmt::Display for Dialect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Dialect::Postgres => "PostgreSQL",
            Dialect::Mysql => "MySQL/MariaDB",
        })
    }
}

/// The longest a waiter on MySQL/MariaDB goes between looks unless configured otherwise
/// ([`SqlSettings::poll_interval`]).
pub const DEFAULT_POLL_INTERVAL: Duration = Duration::from_millis(50);

/// SQL settings of an engine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SqlSettings {
    pub dialect: Dialect,
    /// Prefix of every table, sequence and function name ([`check_table_prefix`]).
    pub table_prefix: String,
    /// MySQL/MariaDB: the longest a queued waiter goes between looks for a hand-off or a free
    /// lock (nothing pushes wake-ups); each look is jittered between half of the interval and
    /// all of it. While the lock changes hands a waiter looks sooner: an eighth of this after
    /// a look that found a new tenure, doubling with each look that found none (PROTOCOL.md
    /// §18). A plain lock's waiter looks by reading its STATUS. Unused on PostgreSQL. 1 ms to
    /// 10 s.
    pub poll_interval: Duration,
}

impl SqlSettings {
    pub fn new(dialect: Dialect) -> Self {
        Self {
            dialect,
            table_prefix: DEFAULT_TABLE_PREFIX.to_owned(),
            poll_interval: DEFAULT_POLL_INTERVAL,
        }
    }

    /// Checks the settings: the table prefix must be a plain SQL identifier, the poll
    /// interval 1 ms to 10 s.
    pub fn check(&self) -> Result<(), Error> {
        check_table_prefix(&self.table_prefix)?;
        let poll = self.poll_interval;
        if poll < Duration::from_millis(1) || poll > Duration::from_secs(10) {
            return Err(Error::InvalidConfig(format!(
                "poll interval {poll:?}: use 1 ms to 10 s"
            )));
        }
        Ok(())
    }

    /// At most this many holds per renewal: PostgreSQL renews a batch with arrays; a MySQL
    /// procedure takes no arrays, so each hold is renewed on its own.
    pub(crate) fn max_batch(&self, configured: usize) -> usize {
        match self.dialect {
            Dialect::Postgres => configured,
            Dialect::Mysql => 1,
        }
    }

    /// The DDL that creates the tables and functions if missing, one statement each, in
    /// order. Every statement can run again (`IF NOT EXISTS`, `CREATE OR REPLACE`).
    pub fn schema(&self) -> Vec<String> {
        let source = match self.dialect {
            Dialect::Postgres => include_str!("postgres.sql"),
            Dialect::Mysql => include_str!("mysql.sql"),
        };
        source
            .split("\n--;\n")
            .map(|statement| statement.replace("dlock_", &self.table_prefix))
            .collect()
    }

    /// The statement that calls `statement`'s function: `SELECT f($1, $2, …)` on PostgreSQL,
    /// `CALL f(?, ?, …)` on MySQL.
    pub fn statement(&self, statement: Statement) -> String {
        let p = &self.table_prefix;
        let function = format!("{p}{}_v1", statement.name());
        let count = self.params(statement).len();
        match self.dialect {
            Dialect::Postgres => {
                let params: Vec<String> = (1..=count).map(|i| format!("${i}")).collect();
                format!("SELECT {function}({})", params.join(", "))
            }
            Dialect::Mysql => format!("CALL {function}({})", vec!["?"; count].join(", ")),
        }
    }

    /// The parameters' types of `statement`, in order.
    pub fn params(&self, statement: Statement) -> &'static [ParamType] {
        use ParamType::*;
        match (statement, self.dialect) {
            (Statement::Acquire | Statement::PermitAcquire, _) => {
                &[Text, Text, Int, Int, Text, Int, Text]
            }
            (Statement::RwAcquire, _) => &[Text, Text, Int, Int, Text, Int, Text, Text],
            (Statement::Release, _) => &[Text, Text, Int, Text],
            (Statement::PermitRelease, _) => &[Text, Text, Text],
            (Statement::RwRelease, _) => &[Text, Text, Int],
            (Statement::Dequeue | Statement::PermitDequeue | Statement::RwDequeue, _) => {
                &[Text, Text]
            }
            (Statement::Extend, Dialect::Postgres) => &[TextList, TextList, IntList],
            (Statement::Extend, Dialect::Mysql) => &[Text, Text, Int],
            (Statement::Status | Statement::Leader, _) => &[Text],
            (Statement::Proclaim, _) => &[Text, Text, Int, Text],
            (Statement::Resign, _) => &[Text, Text],
        }
    }

    /// The function a client checks for when it connects (the last the schema creates):
    /// present, the schema is in place and the client need not (and may not be allowed to)
    /// run DDL. A schema of an earlier release lacks it, so the client brings it up to date
    /// (every statement of the schema can run again).
    pub fn probe_function(&self) -> String {
        format!("{}leader_v1", self.table_prefix)
    }

    /// The channel every election of this prefix tells its observers on (PostgreSQL), with
    /// the election's name as the payload: a channel name has at most 63 bytes, so it cannot
    /// carry the election's name as Redis's does.
    pub fn leader_channel(&self) -> String {
        format!("{}leader", self.table_prefix)
    }

    /// The [`SqlOp`] that runs the lock script `script` on the locks `names` (the script's
    /// keys: one lock, or one per renewed lock for EXTEND) with the script's arguments: the
    /// function takes the lock's name, then the script's arguments in order, typed as
    /// [`SqlSettings::params`] says (an argument the script leaves out is `''`). PostgreSQL's
    /// EXTEND takes arrays instead: names, tokens, leases. Panics on a script the SQL backend
    /// does not run, or numbers that are not integers.
    pub fn call(&self, script: Script, names: &[&str], args: &Words) -> SqlOp {
        let statement = Statement::of(script)
            .unwrap_or_else(|| unreachable!("the SQL backend runs no {}", script.name()));
        let int = |s: &str| -> i64 { s.parse().expect("the scripts' numbers are integers") };
        let params = if statement == Statement::Extend && self.dialect == Dialect::Postgres {
            vec![
                Param::TextList(names.iter().map(|n| n.to_string()).collect()),
                Param::TextList(args.iter().step_by(2).map(str::to_owned).collect()),
                Param::IntList(args.iter().skip(1).step_by(2).map(int).collect()),
            ]
        } else {
            // MySQL renews one hold per statement (`max_batch`).
            assert_eq!(names.len(), 1, "one lock per statement");
            let arg = |i: usize| args.get(i).unwrap_or("");
            let types = self.params(statement);
            std::iter::once(Param::Text(names[0].to_owned()))
                .chain(types[1..].iter().enumerate().map(|(i, kind)| match kind {
                    ParamType::Text => Param::Text(arg(i).to_owned()),
                    ParamType::Int => Param::Int(int(arg(i))),
                    list => unreachable!("no script argument is a {list:?}"),
                }))
                .collect()
        };
        SqlOp::Query {
            statement,
            sql: self.statement(statement),
            params,
        }
    }

    /// STATUS of lock `name`; read its reply with [`parse_status`].
    pub fn status(&self, name: &str) -> SqlOp {
        self.call(Script::Status, &[name], &Words::new())
    }
}

/// The SQL backend carries the lock scripts as calls of the database's functions.
impl Wire for SqlSettings {
    const NAME: &'static str = "SQL";
    const WIRE: &'static str = "SQL";
    const OFFERS: &'static [Primitive] =
        &[Primitive::Lock, Primitive::Semaphore, Primitive::RwLock];

    fn op(&self, op: RedisOp, names: &[&str]) -> Op {
        Op::Sql(match op {
            RedisOp::Eval { script, args, .. } => self.call(script, names, &args),
            RedisOp::Subscribe { channel } => SqlOp::Listen { channel },
        })
    }

    fn reply(response: Response) -> Result<Value, Response> {
        match response {
            Response::Sql(values) => Ok(as_redis(values)),
            other => Err(other),
        }
    }

    /// The statement's values, back from the form [`Wire::reply`] gave them in.
    fn status(reply: &Value) -> Result<LockStatus, Error> {
        let bad = || Error::MalformedReply(format!("status replied {reply:?}"));
        let Value::Array(items) = reply else {
            return Err(bad());
        };
        let values = items.iter().map(|v| match v {
            Value::Nil => Ok(SqlValue::Null),
            Value::Int(n) => Ok(SqlValue::Int(*n)),
            Value::Data(d) => String::from_utf8(d.clone())
                .map(SqlValue::Text)
                .map_err(|_| bad()),
            Value::Status(_) | Value::Array(_) => Err(bad()),
        });
        parse_status(&values.collect::<Result<Vec<_>, _>>()?)
    }

    fn pushes(&self) -> bool {
        self.dialect.pushes()
    }

    fn poll(&self) -> Option<Duration> {
        (!self.dialect.pushes()).then_some(self.poll_interval)
    }

    fn refuse_name(&self, name: &str) -> Result<(), Error> {
        check_name(self.dialect, name)
    }

    const ELECTS: bool = true;

    fn leader_channel(&self, _name: &str) -> String {
        SqlSettings::leader_channel(self)
    }

    /// The payload is the name of the election whose leader changed: its observers read
    /// LEADER (the payload carries no term: it is only a call to look).
    fn leader_news<'a>(&self, name: &str, payload: &'a [u8]) -> Option<LeaderNews<'a>> {
        (payload == name.as_bytes()).then_some(None)
    }

    fn refuse_value(&self, value: &str) -> Result<(), Error> {
        check_text(self.dialect, "a leader's value", value)
    }
}

/// A table prefix is a plain SQL identifier that needs no quoting: 1 to
/// [`MAX_TABLE_PREFIX_LEN`] of `a`–`z`, `0`–`9` and `_`, not starting with a digit.
pub fn check_table_prefix(prefix: &str) -> Result<(), Error> {
    let plain = prefix
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
    let starts_well = prefix.bytes().next().is_some_and(|b| !b.is_ascii_digit());
    if plain && starts_well && prefix.len() <= MAX_TABLE_PREFIX_LEN {
        Ok(())
    } else {
        Err(Error::InvalidConfig(format!(
            "table prefix {prefix:?}: use 1 to {MAX_TABLE_PREFIX_LEN} of a-z, 0-9 and _, not starting with a digit"
        )))
    }
}

/// The lock functions, each called by one statement ([`SqlSettings::statement`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Statement {
    Acquire,
    Release,
    Dequeue,
    Extend,
    Status,
    PermitAcquire,
    PermitRelease,
    PermitDequeue,
    RwAcquire,
    RwRelease,
    RwDequeue,
    Proclaim,
    Resign,
    Leader,
}

impl Statement {
    /// The statement that runs the lock script `script` (its name, with `_` for `-`), if SQL
    /// runs it.
    pub fn of(script: Script) -> Option<Statement> {
        let dashed = |s: Statement| s.name().bytes().map(|b| if b == b'_' { b'-' } else { b });
        Statement::ALL
            .into_iter()
            .find(|s| dashed(*s).eq(script.name().bytes()))
    }

    pub const ALL: [Statement; 14] = [
        Statement::Acquire,
        Statement::Release,
        Statement::Dequeue,
        Statement::Extend,
        Statement::Status,
        Statement::PermitAcquire,
        Statement::PermitRelease,
        Statement::PermitDequeue,
        Statement::RwAcquire,
        Statement::RwRelease,
        Statement::RwDequeue,
        Statement::Proclaim,
        Statement::Resign,
        Statement::Leader,
    ];

    /// It replies text (a `text[]` on PostgreSQL, a row read as text on MySQL), which the
    /// engine reads; every other statement replies integers.
    pub fn replies_text(self) -> bool {
        matches!(self, Statement::Status | Statement::Leader)
    }

    /// The statement's name in docs and logs (the Lua script's): its function is
    /// `<prefix><name>_v1`.
    pub fn name(self) -> &'static str {
        match self {
            Statement::Acquire => "acquire",
            Statement::Release => "release",
            Statement::Dequeue => "dequeue",
            Statement::Extend => "extend",
            Statement::Status => "status",
            Statement::PermitAcquire => "permit_acquire",
            Statement::PermitRelease => "permit_release",
            Statement::PermitDequeue => "permit_dequeue",
            Statement::RwAcquire => "rw_acquire",
            Statement::RwRelease => "rw_release",
            Statement::RwDequeue => "rw_dequeue",
            Statement::Proclaim => "proclaim",
            Statement::Resign => "resign",
            Statement::Leader => "leader",
        }
    }
}

/// A statement's parameter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Param {
    /// `text`.
    Text(String),
    /// `bigint`.
    Int(i64),
    /// `text[]`.
    TextList(Vec<String>),
    /// `bigint[]`.
    IntList(Vec<i64>),
}

impl Param {
    /// The parameter's type.
    pub fn kind(&self) -> ParamType {
        match self {
            Param::Text(_) => ParamType::Text,
            Param::Int(_) => ParamType::Int,
            Param::TextList(_) => ParamType::TextList,
            Param::IntList(_) => ParamType::IntList,
        }
    }
}

/// A parameter's type: what a transport declares when it sends the statement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParamType {
    Text,
    Int,
    TextList,
    IntList,
}

/// A backend operation on a SQL database.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SqlOp {
    /// Run `sql` (the text of `statement`, for this engine's prefix) with `params`, in its own
    /// autocommitted statement; reply with the single value it selects, as a list
    /// ([`crate::Response::Sql`]). A serialization failure or deadlock (SQLSTATE 40001,
    /// 40P01) had no effect: run it again.
    Query {
        statement: Statement,
        sql: String,
        params: Vec<Param>,
    },
    /// `LISTEN "<channel>"` on the transport's notification connection; notifications come
    /// back as [`Notice::Message`](crate::Notice::Message). Reply with an empty list once
    /// listening.
    Listen { channel: String },
}

/// One element of a statement's reply (its value is an array: `bigint[]` or `text[]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SqlValue {
    Null,
    Int(i64),
    Text(String),
}

/// A reply as the Lua script of the same name would give it: the machine reads both alike.
pub(crate) fn as_redis(values: Vec<SqlValue>) -> Value {
    Value::Array(
        values
            .into_iter()
            .map(|v| match v {
                SqlValue::Null => Value::Nil,
                SqlValue::Int(n) => Value::Int(n),
                SqlValue::Text(s) => Value::Data(s.into_bytes()),
            })
            .collect(),
    )
}

/// Reads a STATUS reply: the Lua script's (owner, count, fence, pttl, latest, waiters…), as
/// text on PostgreSQL, and with the waiters in one text separated by spaces (or NULL) on
/// MySQL; read as [`crate::redis::parse_status`] reads that script's.
pub fn parse_status(values: &[SqlValue]) -> Result<LockStatus, Error> {
    let mut values = values.to_vec();
    for value in values.iter_mut().skip(1).take(4) {
        if let SqlValue::Text(s) = value {
            let n = s
                .parse()
                .map_err(|_| Error::MalformedReply(format!("status replied {s:?} for a number")))?;
            *value = SqlValue::Int(n);
        }
    }
    // Owner tokens hold no space: a text of several is MySQL's list of waiters.
    let waiters: Vec<SqlValue> = values
        .split_off(values.len().min(5))
        .into_iter()
        .flat_map(|v| match v {
            SqlValue::Text(list) => list
                .split(' ')
                .filter(|t| !t.is_empty())
                .map(|t| SqlValue::Text(t.to_owned()))
                .collect(),
            SqlValue::Null => Vec::new(),
            other => vec![other],
        })
        .collect();
    values.extend(waiters);
    crate::redis::parse_status(&as_redis(values))
}

/// Names the database cannot store: PostgreSQL's `text` holds no NUL character.
pub(crate) fn check_name(dialect: Dialect, name: &str) -> Result<(), Error> {
    check_text(dialect, "a lock name", name)
}

/// Text the database cannot store (`what` it is, for the error): on PostgreSQL, text with a
/// NUL character.
pub(crate) fn check_text(dialect: Dialect, what: &str, text: &str) -> Result<(), Error> {
    match dialect {
        Dialect::Postgres if text.contains('\0') => Err(Error::InvalidArgument(format!(
            "{what} on PostgreSQL cannot contain a NUL character"
        ))),
        Dialect::Postgres | Dialect::Mysql => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_schema_is_prefixed_and_every_statement_calls_a_function_it_creates() {
        let settings = SqlSettings {
            table_prefix: "app_locks_".into(),
            ..SqlSettings::new(Dialect::Postgres)
        };
        let schema = settings.schema().join("\n");
        assert!(!schema.contains("dlock_"), "{schema}");
        for statement in Statement::ALL {
            let sql = settings.statement(statement);
            let function = sql
                .strip_prefix("SELECT ")
                .and_then(|s| s.split_once('('))
                .map(|(f, _)| f)
                .unwrap();
            assert!(
                schema.contains(&format!("FUNCTION {function}(")),
                "{function}"
            );
            assert_eq!(
                sql.matches('$').count(),
                settings.params(statement).len(),
                "{statement:?}"
            );
        }
    }

    /// A client that finds the probe function runs no DDL, so it must be the last thing each
    /// schema creates: a schema of an earlier release lacks it, and gets what was added.
    #[test]
    fn the_probe_function_is_the_last_thing_each_schema_creates() {
        for dialect in Dialect::ALL {
            let settings = SqlSettings::new(dialect);
            let schema = settings.schema();
            let last = schema.iter().rev().find(|s| s.contains("CREATE ")).unwrap();
            let probe = settings.probe_function();
            assert!(
                last.contains(&format!("FUNCTION {probe}("))
                    || last.contains(&format!("PROCEDURE {probe}(")),
                "{dialect:?}: {last}"
            );
        }
    }

    #[test]
    fn table_prefixes_are_plain_identifiers() {
        for good in ["dlock_", "a", "app_2_"] {
            assert!(check_table_prefix(good).is_ok(), "{good}");
        }
        for bad in ["", "2x", "App", "a-b", "a;drop", "x\"", &"a".repeat(41)] {
            assert!(check_table_prefix(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn calls_carry_the_scripts_arguments_typed() {
        let settings = SqlSettings::new(Dialect::Postgres);
        let args = Words::from(["tok", "1000", "1", "wait", "3000"]);
        let SqlOp::Query {
            statement, params, ..
        } = settings.call(Script::Acquire, &["n"], &args)
        else {
            panic!()
        };
        assert_eq!(statement, Statement::Acquire);
        let kinds: Vec<ParamType> = params.iter().map(Param::kind).collect();
        assert_eq!(kinds, settings.params(Statement::Acquire));
        assert_eq!(params[6], Param::Text(String::new()));
        let args = Words::from(["a", "10", "b", "20"]);
        let SqlOp::Query { params, .. } = settings.call(Script::Extend, &["x", "y"], &args) else {
            panic!()
        };
        assert_eq!(
            params,
            vec![
                Param::TextList(vec!["x".into(), "y".into()]),
                Param::TextList(vec!["a".into(), "b".into()]),
                Param::IntList(vec![10, 20]),
            ]
        );
    }
}
