//! The Redisson-compatible lock: one Redis server, each lock laid out as Redisson's `RLock`
//! lays it out, so that a dlock client and a Java service on Redisson exclude each other on
//! one lock name and wake each other's waiters (`docs/PROTOCOL.md` §19).
//!
//! Per lock name N: the hash `N` itself (the raw name, as Redisson's default `NameMapper`
//! leaves it), one field per holder — Redisson's `<client uuid>:<thread id>`, dlock's
//! `<client id>:<tenure>` — counting its hold levels, with the lease as the key's TTL; the
//! channel `redisson_lock__channel:{N}`, on which a final release publishes `0`; and
//! `RFencedLock`'s token counter `redisson_lock_token:{N}`, from which dlock takes its fencing
//! tokens too (with the time floor of §3). There is no queue: waiters listen on the channel
//! and try again when it speaks or when the holder's TTL runs out (Redisson's own way), so the
//! lock is not fair and has no hand-off.

pub(crate) mod machine;

use core::time::Duration;

use crate::error::Error;
use crate::ids::ClientId;
use crate::owner::OwnerToken;
use crate::redis::{RedisOp, Script, Value, Words};
use crate::status::LockStatus;

/// The commands the Redisson-compatible scripts run (on the lock's raw name, its token
/// counter and its channel).
pub const SCRIPT_COMMANDS: &[&str] = &[
    "del", "exists", "get", "hexists", "hgetall", "hset", "incr", "pexpire", "pttl", "publish",
    "set", "spublish", "time",
];

/// Redisson's name of an object's companion key or channel: `prefix:{name}`, or
/// `prefix:name` when the name has a `{` of its own (`RedissonObject.prefixName`), so that it
/// hashes to the name's slot.
fn prefix_name(prefix: &str, name: &str) -> String {
    if name.contains('{') {
        format!("{prefix}:{name}")
    } else {
        format!("{prefix}:{{{name}}}")
    }
}

/// The keys and channel of one Redisson-compatible lock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Keys {
    /// The lock's hash: holder field → hold count, with the lease as its TTL.
    pub lock: String,
    /// `RFencedLock`'s token counter.
    pub fence: String,
    /// Where a final release publishes `0`.
    pub channel: String,
}

impl Keys {
    pub fn new(name: &str) -> Self {
        Self {
            lock: name.to_owned(),
            fence: prefix_name("redisson_lock_token", name),
            channel: prefix_name("redisson_lock__channel", name),
        }
    }
}

/// The hash field of tenure `seq` of `client`: `<client id, 32 hex>:<tenure>`, in the shape
/// of Redisson's `<uuid>:<thread id>`.
pub fn field(client: ClientId, seq: u64) -> OwnerToken {
    OwnerToken::new::<10>(client, b':', seq)
}

/// REDISSON-ACQUIRE: hold the lock with `field` for `lease` if it is free (or already the
/// field's); read by [`parse_acquire`].
pub fn acquire(keys: &Keys, field: &str, lease: Duration) -> RedisOp {
    RedisOp::Eval {
        script: Script::RedissonAcquire,
        keys: [&keys.lock, &keys.fence].into(),
        args: {
            let mut args = Words::with_capacity(2, field.len() + 20);
            args.push(field);
            args.push_number(crate::redis::ms(lease));
            args
        },
    }
}

/// REDISSON-RELEASE: the final release of `field`'s hold; read by [`parse_release`].
pub fn release(keys: &Keys, field: &str) -> RedisOp {
    RedisOp::Eval {
        script: Script::RedissonRelease,
        keys: [&keys.lock].into(),
        args: [field, &keys.channel].into(),
    }
}

/// REDISSON-EXTEND of several holds, each (lock hash, field, lease); read by
/// [`parse_extend`].
pub fn extend(
    holds: impl IntoIterator<Item = (impl AsRef<str>, impl AsRef<str>, Duration)>,
) -> RedisOp {
    crate::redis::per_key(Script::RedissonExtend, holds)
}

/// REDISSON-STATUS, read only; read by [`parse_status`].
pub fn status(keys: &Keys) -> RedisOp {
    RedisOp::Eval {
        script: Script::RedissonStatus,
        keys: [&keys.lock, &keys.fence].into(),
        args: Words::new(),
    }
}

/// What a REDISSON-ACQUIRE did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AcquireReply {
    Acquired {
        fencing_token: u64,
    },
    /// Held by another field for `ttl` more (`None`: the key has no expiry).
    Busy {
        ttl: Option<Duration>,
    },
}

fn malformed(script: Script, v: &Value) -> Error {
    Error::MalformedReply(format!("{} replied {v:?}", script.name()))
}

pub fn parse_acquire(v: &Value) -> Result<AcquireReply, Error> {
    let bad = || malformed(Script::RedissonAcquire, v);
    match v {
        Value::Array(items) => match items.as_slice() {
            [Value::Int(1), Value::Int(token)] if *token > 0 => Ok(AcquireReply::Acquired {
                fencing_token: *token as u64,
            }),
            [Value::Int(0), Value::Int(pttl)] if *pttl >= -1 => Ok(AcquireReply::Busy {
                ttl: u64::try_from(*pttl).ok().map(Duration::from_millis),
            }),
            _ => Err(bad()),
        },
        _ => Err(bad()),
    }
}

/// Whether the release freed the lock (`false`: the field did not hold it).
pub fn parse_release(v: &Value) -> Result<bool, Error> {
    match v {
        Value::Int(1) => Ok(true),
        Value::Int(0) => Ok(false),
        _ => Err(malformed(Script::RedissonRelease, v)),
    }
}

/// Per hold of a REDISSON-EXTEND of `n`: whether it is still held (and now extended).
pub fn parse_extend(v: &Value, n: usize) -> Result<Vec<bool>, Error> {
    let bad = || malformed(Script::RedissonExtend, v);
    let Value::Array(items) = v else {
        return Err(bad());
    };
    if items.len() != n {
        return Err(bad());
    }
    items
        .iter()
        .map(|i| match i {
            Value::Int(1) => Ok(true),
            Value::Int(0) => Ok(false),
            _ => Err(bad()),
        })
        .collect()
}

/// The status of a Redisson-compatible lock: the holder's field and hold count (a Redisson
/// holder counts its reentries on the server, a dlock holder in its engine: 1), its TTL and
/// the latest fencing token. The holder's own token is not kept (Redisson's hash has no room
/// for it): `fencing_token` is 0. Nobody queues: `waiters` is empty.
pub fn parse_status(v: &Value) -> Result<LockStatus, Error> {
    let bad = || malformed(Script::RedissonStatus, v);
    let Value::Array(items) = v else {
        return Err(bad());
    };
    let [fields @ .., Value::Int(pttl), Value::Int(latest)] = items.as_slice() else {
        return Err(bad());
    };
    let text = |v: &Value| match v {
        Value::Data(d) => String::from_utf8(d.clone()).map_err(|_| bad()),
        _ => Err(bad()),
    };
    let holder = match fields {
        [] => None,
        [field, count] => {
            let count: u32 = text(count)?.parse().map_err(|_| bad())?;
            Some((text(field)?, count))
        }
        _ => return Err(bad()),
    };
    Ok(LockStatus {
        count: holder.as_ref().map_or(0, |h| h.1),
        owner: holder.map(|h| h.0),
        fencing_token: 0,
        ttl: u64::try_from(*pttl).ok().map(Duration::from_millis),
        latest_token: u64::try_from(*latest).map_err(|_| bad())?,
        waiters: Vec::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_redissons() {
        assert_eq!(
            Keys::new("orders/42"),
            Keys {
                lock: "orders/42".into(),
                fence: "redisson_lock_token:{orders/42}".into(),
                channel: "redisson_lock__channel:{orders/42}".into(),
            }
        );
        // A name with a hash tag of its own keeps it.
        assert_eq!(
            Keys::new("a{b}c").channel,
            "redisson_lock__channel:a{b}c".to_owned()
        );
        assert_eq!(
            field(ClientId(0x5eed), 7),
            "00000000000000000000000000005eed:7"
        );
    }

    #[test]
    fn replies_parse_or_are_malformed() {
        let ints = |v: &[i64]| Value::Array(v.iter().map(|i| Value::Int(*i)).collect());
        assert_eq!(
            parse_acquire(&ints(&[1, 9])).unwrap(),
            AcquireReply::Acquired { fencing_token: 9 }
        );
        assert_eq!(
            parse_acquire(&ints(&[0, 250])).unwrap(),
            AcquireReply::Busy {
                ttl: Some(Duration::from_millis(250))
            }
        );
        assert_eq!(
            parse_acquire(&ints(&[0, -1])).unwrap(),
            AcquireReply::Busy { ttl: None }
        );
        for bad in [ints(&[1, 0]), ints(&[0, -2]), ints(&[2, 1]), Value::Nil] {
            assert!(parse_acquire(&bad).is_err(), "{bad:?}");
        }
        assert_eq!(parse_extend(&ints(&[1, 0]), 2).unwrap(), [true, false]);
        assert!(parse_extend(&ints(&[1]), 2).is_err());
        let status = Value::Array(vec![
            Value::Data(b"uuid:1".to_vec()),
            Value::Data(b"2".to_vec()),
            Value::Int(900),
            Value::Int(12),
        ]);
        let s = parse_status(&status).unwrap();
        assert_eq!(
            (s.owner.as_deref(), s.count, s.latest_token),
            (Some("uuid:1"), 2, 12)
        );
        let free = parse_status(&ints(&[-2, 0])).unwrap();
        assert_eq!((free.owner, free.ttl), (None, None));
    }
}
