//! The one translation between the WIT contract (`wit/dlock.wit`) and `dlock-core`'s types.
//!
//! The Wasm guest (`dlock-component`, wit-bindgen) and the wasmtime host (`dlock-wasmtime`,
//! wasmtime's bindgen) generate their own Rust types from the same WIT: the same names, the
//! same fields. [`conversions!`] expands one table of correspondences in each of them; every
//! line of the table gives both directions, so a field added to the contract is added here
//! once (and in the WIT). The guest turns inputs from WIT into the engine's and outputs back;
//! the host does the opposite; both use `convert::cv`.
//!
//! ```ignore
//! use bindings::exports::dlock::lock as wit;
//! dlock_wit_convert::conversions!(wit);
//! let input: dlock_core::Input = convert::cv(wit_input);
//! ```
//!
//! The JSON form (`dlock::json`) is not a third copy of this table: it is a different wire
//! form (durations in milliseconds, RESP values as JSON, errors with a kind and a message),
//! documented in PROTOCOL.md §11 and checked against the same engine by the vectors.

/// Expands `mod convert` in the calling module: `cv(x)` converts any contract value between
/// the WIT types under the module alias `$wit` (with its `types`, `transport` and `engine`
/// interfaces) and `dlock_core`'s.
#[macro_export]
macro_rules! conversions {
    ($wit:ident) => {
        /// The contract's values between WIT and `dlock_core` (`dlock_wit_convert`).
        #[allow(dead_code, unreachable_patterns, unreachable_pub, clippy::all)]
        pub(crate) mod convert {
            use ::std::string::{String, ToString};
            use ::std::time::Duration;
            use ::std::vec::Vec;
            use ::dlock_core as core_;
            use ::dlock_core::redis::Script as CoreScript;
            use ::dlock_core::sql::{Dialect as CoreDialect, Statement as CoreStatement};
            use ::dlock_core::{LostReason as CoreLostReason, NotAcquired as CoreNotAcquired};
            use super::$wit::engine::{
                Config, Dialect, Histogram, Input, LockStats, Output, Protocol, Reply, SqlSettings,
                ZkSettings,
            };
            use super::$wit::transport::{
                Eval, GetData, Message, NodeOp, Notice, Op, RedisNode, RedisOp, Request, Response,
                Script, SetData, SqlOp, SqlParam, SqlQuery, SqlValue, Statement, TransportError,
                Words, ZkOp, ZkReply,
            };
            use super::$wit::types::{
                Acquire, AcquireMulti, Acquired, AcquiredMulti, Command, Error, Event, Extend,
                Extended, Failed, Kind, Leader, LeaderSeen, Lost, LostReason, Member, NotAcquired,
                Observe, Proclaim, Proclaimed, Release, Released, Renewed, Wait,
            };

            /// A value of one side as the other's.
            pub(crate) trait Cv<T> {
                fn cv(self) -> T;
            }

            /// `a` as the other side's value (its type is inferred where it is used).
            pub(crate) fn cv<A: Cv<B>, B>(a: A) -> B {
                a.cv()
            }

            $crate::__same!(u8, u32, u64, i64, bool, String);

            impl<A: Cv<B>, B> Cv<Option<B>> for Option<A> {
                fn cv(self) -> Option<B> {
                    self.map(Cv::cv)
                }
            }

            impl<A: Cv<B>, B> Cv<Vec<B>> for Vec<A> {
                fn cv(self) -> Vec<B> {
                    self.into_iter().map(Cv::cv).collect()
                }
            }

            impl<A: Cv<C>, B: Cv<D>, C, D> Cv<Result<C, D>> for Result<A, B> {
                fn cv(self) -> Result<C, D> {
                    self.map(Cv::cv).map_err(Cv::cv)
                }
            }

            $crate::__newtype!(core_::OpId, core_::HoldId, core_::RequestId);

            /// Durations are nanoseconds in the WIT (a longer one saturates).
            impl Cv<u64> for Duration {
                fn cv(self) -> u64 {
                    u64::try_from(self.as_nanos()).unwrap_or(u64::MAX)
                }
            }

            impl Cv<Duration> for u64 {
                fn cv(self) -> Duration {
                    Duration::from_nanos(self)
                }
            }

            /// Instants are the host's monotonic nanoseconds.
            impl Cv<u64> for core_::Instant {
                fn cv(self) -> u64 {
                    self.as_nanos()
                }
            }

            impl Cv<core_::Instant> for u64 {
                fn cv(self) -> core_::Instant {
                    core_::Instant::from_nanos(self)
                }
            }

            impl Cv<u32> for usize {
                fn cv(self) -> u32 {
                    u32::try_from(self).unwrap_or(u32::MAX)
                }
            }

            impl Cv<usize> for u32 {
                fn cv(self) -> usize {
                    self as usize
                }
            }

            /// The 128-bit client id as (high, low) halves.
            impl Cv<(u64, u64)> for core_::ClientId {
                fn cv(self) -> (u64, u64) {
                    ((self.0 >> 64) as u64, self.0 as u64)
                }
            }

            impl Cv<core_::ClientId> for (u64, u64) {
                fn cv(self) -> core_::ClientId {
                    core_::ClientId((u128::from(self.0) << 64) | u128::from(self.1))
                }
            }

            /// A RESP value as pre-order nodes: an array node is followed by its items.
            impl Cv<Vec<RedisNode>> for core_::redis::Value {
                fn cv(self) -> Vec<RedisNode> {
                    fn flatten(value: core_::redis::Value, nodes: &mut Vec<RedisNode>) {
                        use core_::redis::Value as V;
                        match value {
                            V::Nil => nodes.push(RedisNode::Nil),
                            V::Int(i) => nodes.push(RedisNode::Int(i)),
                            V::Data(d) => nodes.push(RedisNode::Data(d)),
                            V::Status(s) => nodes.push(RedisNode::Status(s)),
                            V::Array(items) => {
                                nodes.push(RedisNode::Array(u32::try_from(items.len()).unwrap_or(u32::MAX)));
                                for item in items {
                                    flatten(item, nodes);
                                }
                            }
                        }
                    }
                    let mut nodes = Vec::new();
                    flatten(self, &mut nodes);
                    nodes
                }
            }

            /// Rebuilds a RESP value from its pre-order nodes; a malformed list becomes a value
            /// the engine rejects as a malformed reply.
            impl Cv<core_::redis::Value> for Vec<RedisNode> {
                fn cv(self) -> core_::redis::Value {
                    use core_::redis::Value as V;
                    fn one(nodes: &mut ::std::vec::IntoIter<RedisNode>) -> Option<V> {
                        Some(match nodes.next()? {
                            RedisNode::Nil => V::Nil,
                            RedisNode::Int(i) => V::Int(i),
                            RedisNode::Data(d) => V::Data(d),
                            RedisNode::Status(s) => V::Status(s),
                            RedisNode::Array(n) => V::Array((0..n).map(|_| one(nodes)).collect::<Option<_>>()?),
                        })
                    }
                    let count = self.len();
                    let mut nodes = self.into_iter();
                    match (one(&mut nodes), nodes.next()) {
                        (Some(v), None) => v,
                        _ => V::Status(::std::format!("malformed node list of {count} nodes")),
                    }
                }
            }

            /// A script's keys or arguments cross whole: their text and their words' ends.
            impl Cv<Words> for core_::redis::Words {
                fn cv(self) -> Words {
                    let (text, ends) = self.into_parts();
                    Words { text, ends }
                }
            }

            /// Ends that do not split the text into words (only a faulty guest sends them, and
            /// `dlock-wasmtime` refuses its output before converting it) make an empty list:
            /// never a read past the text or inside a character.
            impl Cv<core_::redis::Words> for Words {
                fn cv(self) -> core_::redis::Words {
                    core_::redis::Words::from_parts(self.text, self.ends).unwrap_or_default()
                }
            }

            /// A fixed row of counts (histogram buckets, losses per reason) as a list, and
            /// back: a list of another length is cut or padded with zeros.
            impl<const N: usize> Cv<Vec<u64>> for [u64; N] {
                fn cv(self) -> Vec<u64> {
                    self.to_vec()
                }
            }

            impl<const N: usize> Cv<[u64; N]> for Vec<u64> {
                fn cv(self) -> [u64; N] {
                    let mut row = [0; N];
                    for (to, from) in row.iter_mut().zip(self) {
                        *to = from;
                    }
                    row
                }
            }

            $crate::__units!(CoreScript => Script {
                Acquire, Release, Dequeue, Extend, Status, Raise, PermitAcquire, PermitRelease,
                PermitDequeue, RwAcquire, RwRelease, RwDequeue, FencedWrite, AclProbe,
                RedissonAcquire, RedissonRelease, RedissonExtend, RedissonStatus, Proclaim, Resign,
                Leader,
            });
            $crate::__units!(CoreStatement => Statement {
                Acquire, Release, Dequeue, Extend, Status, PermitAcquire, PermitRelease,
                PermitDequeue, RwAcquire, RwRelease, RwDequeue, Proclaim, Resign, Leader
            });
            $crate::__units!(CoreDialect => Dialect { Postgres, Mysql });
            $crate::__units!(CoreLostReason => LostReason {
                Expired, NotOwner, MaxHold, Closed, Disconnected, SessionExpired,
            });
            $crate::__units!(CoreNotAcquired => NotAcquired { Busy, TimedOut, Cancelled });

            $crate::__table!(core_::Config => Config {
                [client_id, waiter_lease, request_timeout, max_batch, lock_delay, protocol]
                (core_::Config { client_id, waiter_lease, request_timeout, max_batch, lock_delay, protocol })
                <=> (Config { client_id, waiter_lease, request_timeout, max_batch, lock_delay, protocol }),
            });
            $crate::__table!(core_::Protocol => Protocol {
                [] (core_::Protocol::Redis) <=> (Protocol::Redis),
                [] (core_::Protocol::Redisson) <=> (Protocol::Redisson),
                [z] (core_::Protocol::ZooKeeper(z)) <=> (Protocol::Zookeeper(z)),
                [nodes] (core_::Protocol::Redlock { nodes }) <=> (Protocol::Redlock(nodes)),
                [s] (core_::Protocol::Sql(s)) <=> (Protocol::Sql(s)),
            });
            $crate::__table!(core_::sql::SqlSettings => SqlSettings {
                [dialect, table_prefix, poll_interval]
                (core_::sql::SqlSettings { dialect, table_prefix, poll_interval })
                <=> (SqlSettings { dialect, table_prefix, poll_interval }),
            });
            $crate::__table!(core_::ZkSettings => ZkSettings {
                [root, session_timeout] (core_::ZkSettings { root, session_timeout })
                <=> (ZkSettings { root, session_timeout }),
            });

            // --- inputs ---
            $crate::__table!(core_::Input => Input {
                [c] (core_::Input::Command(c)) <=> (Input::Command(c)),
                [id, reply] (core_::Input::Reply { id, reply }) <=> (Input::Reply(Reply { id, outcome: reply })),
                [n] (core_::Input::Notice(n)) <=> (Input::Notice(n)),
            });
            $crate::__table!(core_::Command => Command {
                [a] (core_::Command::Acquire(a)) <=> (Command::Acquire(a)),
                [m] (core_::Command::AcquireMulti(m)) <=> (Command::AcquireMulti(m)),
                [op, hold] (core_::Command::Release { op, hold }) <=> (Command::Release(Release { op, hold })),
                [op, hold, lease] (core_::Command::Extend { op, hold, lease }) <=> (Command::Extend(Extend { op, hold, lease })),
                [op] (core_::Command::Cancel { op }) <=> (Command::Cancel(op)),
                [op, hold, value] (core_::Command::Proclaim { op, hold, value }) <=> (Command::Proclaim(Proclaim { op, hold, value })),
                [op, name] (core_::Command::Observe { op, name }) <=> (Command::Observe(Observe { op, name })),
            });
            $crate::__table!(core_::Acquire => Acquire {
                [op, name, owner, lease, wait, max_hold, fair, kind]
                (core_::Acquire { op, name, owner, lease, wait, max_hold, fair, kind })
                <=> (Acquire { op, name, owner, lease, wait, max_hold, fair, kind }),
            });
            $crate::__table!(core_::AcquireMulti => AcquireMulti {
                [op, names, lease, wait, max_hold] (core_::AcquireMulti { op, names, lease, wait, max_hold })
                <=> (AcquireMulti { op, names, lease, wait, max_hold }),
            });
            $crate::__table!(core_::Wait => Wait {
                [] (core_::Wait::No) <=> (Wait::No),
                [t] (core_::Wait::Until(t)) <=> (Wait::Until(t)),
                [] (core_::Wait::Forever) <=> (Wait::Forever),
            });
            $crate::__table!(core_::Kind => Kind {
                [] (core_::Kind::Mutex) <=> (Kind::Mutex),
                [permits] (core_::Kind::Semaphore { permits }) <=> (Kind::Semaphore(permits)),
                [] (core_::Kind::Read) <=> (Kind::Read),
                [] (core_::Kind::Write) <=> (Kind::Write),
            });
            $crate::__table!(core_::Response => Response {
                [v] (core_::Response::Redis(v)) <=> (Response::Redis(v)),
                [r] (core_::Response::Zk(r)) <=> (Response::Zk(r)),
                [values] (core_::Response::Sql(values)) <=> (Response::Sql(values)),
            });
            $crate::__table!(core_::sql::SqlValue => SqlValue {
                [] (core_::sql::SqlValue::Null) <=> (SqlValue::Nil),
                [n] (core_::sql::SqlValue::Int(n)) <=> (SqlValue::Int(n)),
                [s] (core_::sql::SqlValue::Text(s)) <=> (SqlValue::Text(s)),
            });
            $crate::__table!(core_::zk::ZkReply => ZkReply {
                [] (core_::zk::ZkReply::Done) <=> (ZkReply::Done),
                [path] (core_::zk::ZkReply::Created(path)) <=> (ZkReply::Created(path)),
                [names] (core_::zk::ZkReply::Children(names)) <=> (ZkReply::Children(names)),
                [] (core_::zk::ZkReply::NoNode) <=> (ZkReply::NoNode),
                [] (core_::zk::ZkReply::NodeExists) <=> (ZkReply::NodeExists),
                [data] (core_::zk::ZkReply::Data(data)) <=> (ZkReply::Data(data)),
            });
            $crate::__table!(core_::TransportError => TransportError {
                [why] (core_::TransportError::Unavailable(why)) <=> (TransportError::Unavailable(why)),
                [why] (core_::TransportError::Server(why)) <=> (TransportError::Server(why)),
            } else other => TransportError::Unavailable(::std::format!("{other:?}")));
            $crate::__table!(core_::Notice => Notice {
                [] (core_::Notice::Connected) <=> (Notice::Connected),
                [] (core_::Notice::Disconnected) <=> (Notice::Disconnected),
                [channel, payload] (core_::Notice::Message { channel, payload }) <=> (Notice::Message(Message { channel, payload })),
                [path] (core_::Notice::Watch { path }) <=> (Notice::Watch(path)),
                [] (core_::Notice::SessionExpired) <=> (Notice::SessionExpired),
                [] (core_::Notice::Closed) <=> (Notice::Closed),
            });

            // --- outputs ---
            $crate::__table!(core_::Output => Output {
                [r] (core_::Output::Request(r)) <=> (Output::Request(r)),
                [e] (core_::Output::Event(e)) <=> (Output::Event(e)),
            });
            $crate::__table!(core_::Request => Request {
                [id, op] (core_::Request { id, op }) <=> (Request { id, op }),
            });
            $crate::__table!(core_::Op => Op {
                [op] (core_::Op::Redis(op)) <=> (Op::Redis(op)),
                [node, op] (core_::Op::Redlock { node, op }) <=> (Op::Redlock(NodeOp { node, op })),
                [op] (core_::Op::Zk(op)) <=> (Op::Zk(op)),
                [op] (core_::Op::Sql(op)) <=> (Op::Sql(op)),
            });
            $crate::__table!(core_::sql::SqlOp => SqlOp {
                [statement, sql, params] (core_::sql::SqlOp::Query { statement, sql, params })
                <=> (SqlOp::Query(SqlQuery { statement, sql, params })),
                [channel] (core_::sql::SqlOp::Listen { channel }) <=> (SqlOp::Listen(channel)),
            });
            $crate::__table!(core_::sql::Param => SqlParam {
                [s] (core_::sql::Param::Text(s)) <=> (SqlParam::Text(s)),
                [n] (core_::sql::Param::Int(n)) <=> (SqlParam::Int(n)),
                [items] (core_::sql::Param::TextList(items)) <=> (SqlParam::TextList(items)),
                [items] (core_::sql::Param::IntList(items)) <=> (SqlParam::IntList(items)),
            });
            $crate::__table!(core_::redis::RedisOp => RedisOp {
                [script, keys, args] (core_::redis::RedisOp::Eval { script, keys, args }) <=> (RedisOp::Eval(Eval { script, keys, args })),
                [channel] (core_::redis::RedisOp::Subscribe { channel }) <=> (RedisOp::Subscribe(channel)),
            });
            $crate::__table!(core_::zk::ZkOp => ZkOp {
                [path] (core_::zk::ZkOp::CreateParents { path }) <=> (ZkOp::CreateParents(path)),
                [prefix] (core_::zk::ZkOp::CreateSequential { prefix }) <=> (ZkOp::CreateSequential(prefix)),
                [path] (core_::zk::ZkOp::CreateEphemeral { path }) <=> (ZkOp::CreateEphemeral(path)),
                [path] (core_::zk::ZkOp::Delete { path }) <=> (ZkOp::Delete(path)),
                [path] (core_::zk::ZkOp::Children { path }) <=> (ZkOp::Children(path)),
                [path] (core_::zk::ZkOp::Watch { path }) <=> (ZkOp::Watch(path)),
                [path] (core_::zk::ZkOp::Exists { path }) <=> (ZkOp::Exists(path)),
                [path, data] (core_::zk::ZkOp::SetData { path, data }) <=> (ZkOp::SetData(SetData { path, data })),
                [path, watch] (core_::zk::ZkOp::GetData { path, watch }) <=> (ZkOp::GetData(GetData { path, watch })),
                [path] (core_::zk::ZkOp::WatchChildren { path }) <=> (ZkOp::WatchChildren(path)),
            });
            $crate::__table!(core_::Event => Event {
                [op, hold, fencing_token, valid_until, count]
                (core_::Event::Acquired { op, hold, fencing_token, valid_until, count })
                <=> (Event::Acquired(Acquired { op, hold, fencing_token, valid_until, count })),
                [op, hold, members, valid_until]
                (core_::Event::AcquiredMulti { op, hold, members, valid_until })
                <=> (Event::AcquiredMulti(AcquiredMulti { op, hold, members, valid_until })),
                [op, reason] (core_::Event::NotAcquired { op, reason }) <=> (Event::NotAcquired((op, reason))),
                [op, hold, count] (core_::Event::Released { op, hold, count }) <=> (Event::Released(Released { op, hold, count })),
                [op, hold, valid_until] (core_::Event::Extended { op, hold, valid_until }) <=> (Event::Extended(Extended { op, hold, valid_until })),
                [op, error] (core_::Event::Failed { op, error }) <=> (Event::Failed(Failed { op, error })),
                [hold, valid_until] (core_::Event::Renewed { hold, valid_until }) <=> (Event::Renewed(Renewed { hold, valid_until })),
                [hold, reason] (core_::Event::Lost { hold, reason }) <=> (Event::Lost(Lost { hold, reason })),
                [op, hold, term] (core_::Event::Proclaimed { op, hold, term }) <=> (Event::Proclaimed(Proclaimed { op, hold, term })),
                [op, leader] (core_::Event::Leader { op, leader }) <=> (Event::Leader(LeaderSeen { op, leader })),
            });
            $crate::__table!(core_::LockStats => LockStats {
                [name, kind, acquired, handed_off, reentered, released, busy, timed_out, cancelled,
                 failed, renewals, renewals_failed, lost, held, waiting, wait, hold]
                (core_::LockStats { name, kind, acquired, handed_off, reentered, released, busy,
                    timed_out, cancelled, failed, renewals, renewals_failed, lost, held, waiting,
                    wait, hold })
                <=> (LockStats { name, kind, acquired, handed_off, reentered, released, busy,
                    timed_out, cancelled, failed, renewals, renewals_failed, lost, held, waiting,
                    wait, hold }),
            });
            $crate::__table!(core_::Histogram => Histogram {
                [count, sum, max, buckets] (core_::Histogram { count, sum, max, buckets })
                <=> (Histogram { count, sum, max, buckets }),
            });
            $crate::__table!(core_::Leader => Leader {
                [term, value] (core_::Leader { term, value }) <=> (Leader { term, value }),
            });
            $crate::__table!(core_::Member => Member {
                [name, fencing_token] (core_::Member { name, fencing_token }) <=> (Member { name, fencing_token }),
            });
            $crate::__table!(core_::Error => Error {
                [] (core_::Error::EmptyName) <=> (Error::EmptyName),
                [len] (core_::Error::NameTooLong { len }) <=> (Error::NameTooLong(len)),
                [lease] (core_::Error::InvalidLease { lease }) <=> (Error::InvalidLease(lease)),
                [op] (core_::Error::DuplicateOp { op }) <=> (Error::DuplicateOp(op)),
                [hold] (core_::Error::NotHeld { hold }) <=> (Error::NotHeld(hold)),
                [op] (core_::Error::AlreadyWaiting { op }) <=> (Error::AlreadyWaiting(op)),
                [] (core_::Error::Closed) <=> (Error::Closed),
                [why] (core_::Error::Unavailable(why)) <=> (Error::Unavailable(why)),
                [] (core_::Error::Timeout) <=> (Error::Timeout),
                [why] (core_::Error::Backend(why)) <=> (Error::Backend(why)),
                [why] (core_::Error::MalformedReply(why)) <=> (Error::MalformedReply(why)),
                [hold] (core_::Error::LockLost { hold }) <=> (Error::LockLost(hold)),
                [] (core_::Error::SessionExpired) <=> (Error::SessionExpired),
                [why] (core_::Error::InvalidConfig(why)) <=> (Error::InvalidConfig(why)),
                [why] (core_::Error::InvalidArgument(why)) <=> (Error::InvalidArgument(why)),
            } else other => Error::Backend(other.to_string()));
        }
    };
}

/// One correspondence table: each line `[bound names] (core pattern) <=> (WIT pattern)` is a
/// pattern on one side and, its names converted, the value on the other. `else` handles the
/// core variants a `#[non_exhaustive]` enum may gain.
#[doc(hidden)]
#[macro_export]
macro_rules! __table {
    ($core:ty => $wit:ty {
        $([$($v:ident),*] ($($c:tt)+) <=> ($($w:tt)+)),* $(,)?
    } $(else $other:ident => $fallback:expr)?) => {
        impl Cv<$wit> for $core {
            fn cv(self) -> $wit {
                match self {
                    $($($c)+ => { $(let $v = Cv::cv($v);)* $($w)+ })*
                    $($other => $fallback,)?
                }
            }
        }

        impl Cv<$core> for $wit {
            fn cv(self) -> $core {
                match self {
                    $($($w)+ => { $(let $v = Cv::cv($v);)* $($c)+ })*
                }
            }
        }
    };
}

/// A table of unit variants with the same names on both sides.
#[doc(hidden)]
#[macro_export]
macro_rules! __units {
    ($core:ident => $wit:ident { $($variant:ident),* $(,)? }) => {
        $crate::__table!($core => $wit { $([] ($core::$variant) <=> ($wit::$variant)),* });
    };
}

/// Types that are the same on both sides.
#[doc(hidden)]
#[macro_export]
macro_rules! __same {
    ($($t:ty),*) => {
        $(impl Cv<$t> for $t {
            fn cv(self) -> $t {
                self
            }
        })*
    };
}

/// The engine's ids, which are `u64`s in the WIT.
#[doc(hidden)]
#[macro_export]
macro_rules! __newtype {
    ($($t:path),*) => {
        $(impl Cv<u64> for $t {
            fn cv(self) -> u64 {
                self.0
            }
        }

        impl Cv<$t> for u64 {
            fn cv(self) -> $t {
                $t(self)
            }
        })*
    };
}
