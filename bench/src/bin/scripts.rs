//! `just bench-scripts`: where a dlock cycle's time on the Redis server goes.
//!
//! On a fast loopback most of an uncontended dlock cycle is the server running its two
//! functions (`just bench`: "the server's part"). This splits that time, on a redis-server of
//! its own, pinned to the first CPU and this process to the second: each variant below is
//! sent as 2,000 pipelined cycles (so the client and the wire cost the server almost
//! nothing), and the server's own time per command comes from `INFO commandstats` (reset
//! before each run; a function's or script's time includes the commands it runs, which are
//! also listed on their own). Fifteen rounds take turns across the variants; the least time
//! of each counts.
//!
//! - yardsticks, functions of a library of their own: one that returns 1, one that returns a
//!   table of three integers, one the same three as a string, one that runs one `EXISTS`,
//!   and two that run the commands of
//!   dlock's uncontended cycle and return its replies, with no other Lua;
//! - dlock's ACQUIRE and RELEASE by `FCALL` (the library of `dlock_core::redis::library()`, with
//!   the keys and arguments the engine sends), on one lock and on 1,000 locks in turn;
//! - the same by `EVALSHA`;
//! - rslock's cycle: `SET NX PX`, then its unlock script by `EVALSHA`;
//! - a sketch, not protocol v1: dlock's ACQUIRE and RELEASE, their text unchanged, each run
//!   for 10 or 100 locks by one `FCALL` ([`batch_library`]), on 1,000 locks in turn: what
//!   one Redis core would carry if a client sent the acquires and releases of its tasks in
//!   batches, as it sends renewals.
//!
//! Writes bench/results/scripts.md.

use std::collections::BTreeMap;
use std::time::Duration;

use dlock_bench::{commandstats, script_call};
use dlock_core::redis::{self as protocol, Fairness, LockKeys, Mode, RedisOp, Script};
use dlock_testkit::RedisServer;

const CYCLES: usize = 2_000;
const BATCH: usize = 500;
const ROUNDS: usize = 15;
const LEASE: Duration = Duration::from_secs(10);

const YARDSTICKS: &str = "#!lua name=dlock_bench_yardsticks
redis.register_function('yard_return', function(KEYS, ARGV) return 1 end)
redis.register_function('yard_table', function(KEYS, ARGV) return {1, 2, 3} end)
redis.register_function('yard_string', function(KEYS, ARGV) return '1 2 3' end)
redis.register_function('yard_exists', function(KEYS, ARGV) redis.call('EXISTS', KEYS[1]) return 1 end)
redis.register_function('yard_acquire', function(KEYS, ARGV)
  redis.call('EXISTS', KEYS[1], KEYS[3])
  redis.call('TIME')
  redis.call('INCR', KEYS[2])
  redis.call('HSET', KEYS[1], 'owner', ARGV[1], 'count', '1', 'fence', '1')
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {1, 1, 1}
end)
redis.register_function('yard_release', function(KEYS, ARGV)
  redis.call('HGET', KEYS[1], 'owner')
  redis.call('DEL', KEYS[1])
  redis.call('LINDEX', KEYS[3], '0')
  return {2, 0}
end)
";

/// A sketch, not protocol v1: functions that run dlock's ACQUIRE (`batch_acquire`) and
/// RELEASE (`batch_release`) for each lock of one call, their bodies and helpers unchanged,
/// with the time read once per call. The keys go in fours (lock, fence, queue, waiters), the
/// arguments in runs of `acquire_args` and `release_args`; the reply is each lock's reply.
fn batch_library(acquire_args: usize, release_args: usize) -> String {
    let mut text = String::from("#!lua name=dlock_bench_batch\n");
    for helpers in Script::Acquire.helpers() {
        text.push_str(helpers);
    }
    for (name, script) in [
        ("acquire_one", Script::Acquire),
        ("release_one", Script::Release),
    ] {
        text.push_str(&format!(
            "\nlocal function {name}(KEYS, ARGV)\n{}end\n",
            script.body()
        ));
    }
    text.push_str(&format!(
        "
local function each(one, n, KEYS, ARGV)
  clock, stamp = nil, nil
  local out, keys, args = {{}}, {{}}, {{}}
  for i = 0, #KEYS / 4 - 1 do
    for k = 1, 4 do keys[k] = KEYS[4 * i + k] end
    for a = 1, n do args[a] = ARGV[n * i + a] end
    out[i + 1] = one(keys, args)
  end
  return out
end
redis.register_function('batch_acquire', function(KEYS, ARGV) return each(acquire_one, {acquire_args}, KEYS, ARGV) end)
redis.register_function('batch_release', function(KEYS, ARGV) return each(release_one, {release_args}, KEYS, ARGV) end)
"
    ));
    text
}

/// rslock's unlock script (rslock 0.10, `UNLOCK_SCRIPT`).
const RSLOCK_UNLOCK: &str = r#"if redis.call("get",KEYS[1]) == ARGV[1] then
  return redis.call("del",KEYS[1])
else
  return 0
end"#;

/// One way of running a cycle: its commands for cycle `i`, and the commands it sends itself
/// (the others in commandstats are the ones its scripts run).
struct Variant {
    label: &'static str,
    top: &'static [&'static str],
    cycle: Box<dyn Fn(usize) -> Vec<redis::Cmd>>,
}

/// What commandstats said about one run: per command, its calls and µs.
type Stats = BTreeMap<String, (u64, u64)>;

fn stats(con: &mut redis::Connection) -> Stats {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(con)
        .expect("INFO");
    commandstats(&info)
}

fn run(con: &mut redis::Connection, variant: &Variant) -> Stats {
    let _: () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query(con)
        .expect("CONFIG RESETSTAT");
    for start in (0..CYCLES).step_by(BATCH) {
        let mut pipe = redis::pipe();
        for i in start..start + BATCH {
            for cmd in (variant.cycle)(i) {
                pipe.add_command(cmd);
            }
        }
        let replies: Vec<redis::Value> = pipe.query(con).expect("pipeline");
        if let Some(e) = replies.iter().find_map(|v| match v {
            redis::Value::ServerError(e) => Some(e.clone()),
            _ => None,
        }) {
            panic!("{}: {e:?}", variant.label);
        }
    }
    let mut stats = stats(con);
    stats.retain(|name, _| name != "config|resetstat");
    stats
}

fn main() {
    let server = RedisServer::start();
    let client = redis::Client::open(server.url()).expect("URL");
    let mut con = client.get_connection().expect("connects");
    let info: String = redis::cmd("INFO")
        .arg("server")
        .query(&mut con)
        .expect("INFO");
    let field = |name: &str| {
        info.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(':').map(str::to_owned))
            .unwrap_or_default()
    };
    let version = field("redis_version");
    // The server on one CPU and this client on another, where there are two (as `just bench`
    // places them); without taskset, wherever the scheduler puts them.
    let pinned = std::thread::available_parallelism().is_ok_and(|n| n.get() >= 2)
        && [
            (field("process_id"), "0"),
            (std::process::id().to_string(), "1"),
        ]
        .iter()
        .all(|(pid, cpu)| {
            std::process::Command::new("taskset")
                .args(["-cp", cpu, pid])
                .stdout(std::process::Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        });
    let library = protocol::library();
    let token = dlock_core::owner_token(dlock_core::ClientId(0xbe4c), 1);
    // dlock's ACQUIRE and RELEASE of lock `name`, as the engine sends them uncontended.
    let ops = move |name: &str| {
        let keys = LockKeys::new(name);
        (
            protocol::acquire(
                keys.clone(),
                &token,
                LEASE,
                1,
                Mode::Wait,
                LEASE,
                Fairness::Fair,
            ),
            protocol::release(keys, &token, 0, Fairness::Fair),
        )
    };
    let argc = |op: RedisOp| match op {
        RedisOp::Eval { args, .. } => args.len(),
        _ => unreachable!("a script"),
    };
    let (take, give) = ops("bench-scripts");
    let batch = batch_library(argc(take), argc(give));
    for source in [library.source.as_str(), YARDSTICKS, batch.as_str()] {
        let _: String = redis::cmd("FUNCTION")
            .arg("LOAD")
            .arg("REPLACE")
            .arg(source)
            .query(&mut con)
            .unwrap_or_else(|e| panic!("FUNCTION LOAD (Redis 7 or later): {e}"));
    }
    let mut sha = |source: String| -> String {
        redis::cmd("SCRIPT")
            .arg("LOAD")
            .arg(source)
            .query(&mut con)
            .expect("SCRIPT LOAD")
    };
    let (acquire_sha, release_sha) = (sha(Script::Acquire.source()), sha(Script::Release.source()));
    let unlock_sha = sha(RSLOCK_UNLOCK.to_owned());

    let lock_name = |i: usize| format!("bench-scripts-{}", i % 1000);
    let fcall = |name: &str, op: RedisOp| script_call("FCALL", name, &[op]);
    let (acquire_fn, release_fn) = (
        library.function(Script::Acquire),
        library.function(Script::Release),
    );
    let both = |a: &str, r: &str| {
        let (a, r) = (a.to_owned(), r.to_owned());
        move |name: &str| {
            let (take, give) = ops(name);
            vec![fcall(&a, take), fcall(&r, give)]
        }
    };
    let yard = |function: &'static str| {
        Box::new(move |_| {
            let (take, give) = ops("bench-scripts");
            vec![fcall(function, take), fcall(function, give)]
        }) as Box<dyn Fn(usize) -> Vec<redis::Cmd>>
    };
    let dlock_one = both(&acquire_fn, &release_fn);
    let dlock_many = both(&acquire_fn, &release_fn);
    let dlock_yard = both("yard_acquire", "yard_release");
    let dlock_sha = {
        move |_| {
            let (take, give) = ops("bench-scripts");
            vec![
                script_call("EVALSHA", &acquire_sha, &[take]),
                script_call("EVALSHA", &release_sha, &[give]),
            ]
        }
    };
    // A batch of `per` locks from cycle `i` on (a cycle a lock's): `per` divides CYCLES.
    let batched = |per: usize| Variant {
        label: match per {
            10 => {
                "a sketch, not protocol v1: dlock's ACQUIRE + RELEASE for 10 locks per FCALL, 1,000 locks in turn"
            }
            _ => "the same, 100 locks per FCALL",
        },
        top: &["fcall"],
        cycle: Box::new(move |i| {
            if i % per != 0 {
                return Vec::new();
            }
            let (take, give): (Vec<RedisOp>, Vec<RedisOp>) =
                (i..i + per).map(|j| ops(&lock_name(j))).unzip();
            vec![
                script_call("FCALL", "batch_acquire", &take),
                script_call("FCALL", "batch_release", &give),
            ]
        }),
    };
    let variants = [
        Variant {
            label: "FCALL of a function that returns 1, twice",
            top: &["fcall"],
            cycle: yard("yard_return"),
        },
        Variant {
            label: "FCALL of a function that returns a table of three integers, twice",
            top: &["fcall"],
            cycle: yard("yard_table"),
        },
        Variant {
            label: "FCALL of a function that returns them as a string, twice",
            top: &["fcall"],
            cycle: yard("yard_string"),
        },
        Variant {
            label: "FCALL of a function that runs one EXISTS, twice",
            top: &["fcall"],
            cycle: yard("yard_exists"),
        },
        Variant {
            label: "dlock's commands and replies from two functions with no other Lua",
            top: &["fcall"],
            cycle: Box::new(move |_| dlock_yard("bench-scripts")),
        },
        Variant {
            label: "dlock's ACQUIRE + RELEASE by FCALL, one lock",
            top: &["fcall"],
            cycle: Box::new(move |_| dlock_one("bench-scripts")),
        },
        Variant {
            label: "dlock's ACQUIRE + RELEASE by FCALL, 1,000 locks in turn",
            top: &["fcall"],
            cycle: Box::new(move |i| dlock_many(&lock_name(i))),
        },
        Variant {
            label: "dlock's ACQUIRE + RELEASE by EVALSHA, one lock",
            top: &["evalsha"],
            cycle: Box::new(dlock_sha),
        },
        Variant {
            label: "rslock: SET NX PX, then its unlock script by EVALSHA",
            top: &["set", "evalsha"],
            cycle: Box::new(move |_| {
                let mut set = redis::cmd("SET");
                set.arg("bench-scripts-rslock")
                    .arg("0123456789abcdef0123")
                    .arg("NX")
                    .arg("PX")
                    .arg(LEASE.as_millis() as u64);
                let mut unlock = redis::cmd("EVALSHA");
                unlock
                    .arg(&unlock_sha)
                    .arg(1)
                    .arg("bench-scripts-rslock")
                    .arg("0123456789abcdef0123");
                vec![set, unlock]
            }),
        },
        batched(10),
        batched(100),
    ];

    // Per variant: the least server µs per cycle of the rounds, and that round's stats.
    let mut best: Vec<Option<(f64, Stats)>> = variants.iter().map(|_| None).collect();
    for variant in &variants {
        run(&mut con, variant); // warm-up
    }
    for _ in 0..ROUNDS {
        for (variant, best) in variants.iter().zip(&mut best) {
            let stats = run(&mut con, variant);
            let usec: u64 = variant
                .top
                .iter()
                .filter_map(|c| stats.get(*c))
                .map(|(_, usec)| usec)
                .sum();
            let per_cycle = usec as f64 / CYCLES as f64;
            if best.as_ref().is_none_or(|(b, _)| per_cycle < *b) {
                *best = Some((per_cycle, stats));
            }
        }
    }
    let us = |i: usize| best[i].as_ref().expect("measured").0;

    let mut report = format!(
        "# Where a dlock cycle's time on the Redis server goes\n\n\
         `just bench-scripts` on redis-server {version} ({}, {} CPUs{}): each row is {CYCLES} \
         pipelined cycles, best of {ROUNDS} rounds; the server's time per cycle from `INFO \
         commandstats` (a function's or script's time includes the commands it runs). \
         Commands: per cycle, each with its own time per call.\n\n\
         | cycle | server µs per cycle | commands per cycle |\n| --- | ---: | --- |\n",
        std::env::consts::ARCH,
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        if pinned {
            "; the server on the first, this client on the second"
        } else {
            ""
        },
    );
    for (variant, best) in variants.iter().zip(&best) {
        let (per_cycle, stats) = best.as_ref().expect("measured");
        let mut commands: Vec<(&String, &(u64, u64))> = stats.iter().collect();
        commands.sort_by_key(|(_, (calls, usec))| std::cmp::Reverse(usec * 1000 / calls.max(&1)));
        let commands: Vec<String> = commands
            .iter()
            .filter(|(_, (calls, _))| *calls as usize >= CYCLES / 100)
            .map(|(name, (calls, usec))| {
                format!(
                    "{name} ×{:.2} ({:.2} µs)",
                    *calls as f64 / CYCLES as f64,
                    *usec as f64 / *calls as f64
                )
            })
            .collect();
        report.push_str(&format!(
            "| {} | {per_cycle:.2} | {} |\n",
            variant.label,
            commands.join(", ")
        ));
    }
    let own = |i: usize, command: &str| {
        best[i]
            .as_ref()
            .and_then(|(_, s)| s.get(command))
            .map_or(0.0, |(calls, usec)| *usec as f64 / *calls as f64)
    };
    report.push_str(&format!(
        "\n## What it is made of\n\n\
         | part | server µs |\n| --- | ---: |\n\
         | one FCALL of a function that does nothing | {:.2} |\n\
         | a table reply of three integers, over `return 1` | {:.2} |\n\
         | the same three as one string, over `return 1` | {:.2} |\n\
         | one `redis.call` from a function, beyond the command's own time ({:.2} µs for EXISTS) | {:.2} |\n\
         | dlock's Lua beside its commands and replies, per cycle | {:.2} |\n\
         | the fence floor's SET when each acquire is of a lock not taken in the same ms, per cycle | {:.2} |\n\
         | EVALSHA over FCALL, per cycle (the helpers made on every call) | {:.2} |\n\
         | dlock's cycle / rslock's (one lock) | {:.2} |\n\
         | dlock's cycle / rslock's (1,000 locks) | {:.2} |\n\
         | the sketch's cycle / rslock's: 10 locks per FCALL | {:.2} |\n\
         | the sketch's cycle / rslock's: 100 locks per FCALL | {:.2} |\n",
        us(0) / 2.0,
        (us(1) - us(0)) / 2.0,
        (us(2) - us(0)) / 2.0,
        own(3, "exists"),
        (us(3) - us(0)) / 2.0 - own(3, "exists"),
        us(5) - us(4),
        us(6) - us(5),
        us(7) - us(5),
        us(5) / us(8),
        us(6) / us(8),
        us(9) / us(8),
        us(10) / us(8),
    ));
    print!("{report}");
    let out = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("results/scripts.md");
    std::fs::write(out, report).expect("writable bench/results");
}
