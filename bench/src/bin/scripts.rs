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
//!   batches, as it sends renewals;
//! - a sketch, not protocol v1, of the uncontended path only: the lock as one string set with
//!   `PX`, fewer keys and arguments, string replies ([`string_library`]).
//!
//! Then, where valgrind is installed, each variant again on a redis-server run by callgrind:
//! the server's instructions per cycle, everything it does for the cycle (reading and
//! parsing the requests and writing the replies too, which commandstats leaves out), exact
//! from run to run.
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

/// A sketch, not protocol v1, of the uncontended path only: the lock as one string
/// (`owner count fence`, set with `PX`), three keys and two arguments to acquire, two keys and
/// one argument to release, string replies; the fencing token and its floor as v1 makes them
/// (the prelude's helpers). What a layout of fewer calls, keys and arguments would save.
fn string_library() -> String {
    let mut text = String::from("#!lua name=dlock_bench_string\n");
    for helpers in Script::Acquire.helpers() {
        text.push_str(helpers);
    }
    text.push_str(
        "
redis.register_function{function_name = 'string_acquire', callback = function(KEYS, ARGV)
  clock, stamp = nil, nil
  if redis.call('EXISTS', KEYS[1], KEYS[3]) ~= 0 then return 'busy' end
  local token, text = next_token(KEYS[2])
  redis.call('SET', KEYS[1], ARGV[1] .. ' 1 ' .. text, 'PX', ARGV[2])
  return '1 ' .. text .. ' 1'
end}
redis.register_function{function_name = 'string_release', flags = {'allow-oom'}, callback = function(KEYS, ARGV)
  local held = redis.call('GET', KEYS[1])
  if not held or string.sub(held, 1, #ARGV[1] + 1) ~= ARGV[1] .. ' ' then return '0' end
  redis.call('DEL', KEYS[1])
  if redis.call('LINDEX', KEYS[2], '0') then return 'queued' end
  return '2 0'
end}
",
    );
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
    send(con, variant);
    let mut stats = stats(con);
    stats.retain(|name, _| name != "config|resetstat");
    stats
}

/// Sends the variant's [`CYCLES`] cycles, pipelined, and checks that none failed.
fn send(con: &mut redis::Connection, variant: &Variant) {
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
}

/// `n` with a comma between each three digits (116,536).
fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, digit) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(digit);
    }
    out
}

/// Loads the function libraries `libraries` and the scripts `scripts` (by `SCRIPT LOAD`: a
/// script's SHA is its text's, the same on every server).
fn load(con: &mut redis::Connection, libraries: &[&str], scripts: &[&str]) {
    for source in libraries {
        let _: String = redis::cmd("FUNCTION")
            .arg("LOAD")
            .arg("REPLACE")
            .arg(source)
            .query(con)
            .unwrap_or_else(|e| panic!("FUNCTION LOAD (Redis 7 or later): {e}"));
    }
    for source in scripts {
        let _: String = redis::cmd("SCRIPT")
            .arg("LOAD")
            .arg(source)
            .query(con)
            .expect("SCRIPT LOAD");
    }
}

/// Each variant's instructions per cycle in a redis-server of its own run by callgrind (its
/// counts zeroed before the variant's cycles and dumped after them: user space, every part
/// of the server — reading and parsing the requests, the commands, the replies), or why
/// there are none (no valgrind here). Exact from run to run, where the times above move by
/// a few percent.
fn instructions(
    variants: &[Variant],
    libraries: &[&str],
    scripts: &[&str],
) -> Result<Vec<u64>, String> {
    let tool = |program: &str| {
        std::process::Command::new(program)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
    };
    if !tool("valgrind") || !tool("callgrind_control") {
        return Err("valgrind is not installed".into());
    }
    let dumps = std::env::temp_dir().join(format!("dlock-bench-scripts-{}", std::process::id()));
    std::fs::create_dir_all(&dumps).map_err(|e| e.to_string())?;
    let out = dumps.join("callgrind.out");
    let server = RedisServer::start_under(
        &[
            "valgrind",
            "--tool=callgrind",
            &format!("--callgrind-out-file={}", out.display()),
            &format!("--log-file={}", dumps.join("valgrind.log").display()),
        ],
        &[],
    );
    let pid = server.pid().expect("running").to_string();
    let control = |option: &str| {
        let status = std::process::Command::new("callgrind_control")
            .args([option, &pid])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status();
        assert!(
            status.is_ok_and(|s| s.success()),
            "callgrind_control {option}"
        );
    };
    let mut con = redis::Client::open(server.url())
        .and_then(|c| c.get_connection())
        .map_err(|e| e.to_string())?;
    load(&mut con, libraries, scripts);
    let mut counts = Vec::new();
    for (dump, variant) in (1..).zip(variants) {
        send(&mut con, variant); // warm-up
        control("-z");
        send(&mut con, variant);
        control("-d");
        let text = std::fs::read_to_string(format!("{}.{dump}", out.display()))
            .map_err(|e| format!("callgrind's dump {dump}: {e}"))?;
        let total: u64 = text
            .lines()
            .find_map(|l| l.strip_prefix("summary: ").or(l.strip_prefix("totals: ")))
            .and_then(|n| n.trim().parse().ok())
            .ok_or("a callgrind dump without its total")?;
        counts.push(total / CYCLES as u64);
    }
    drop(server);
    let _ = std::fs::remove_dir_all(&dumps);
    Ok(counts)
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
    // Counted before this process is pinned to one CPU.
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    // The server on one CPU and this client on another, where there are two (as `just bench`
    // places them); without taskset, wherever the scheduler puts them.
    let pinned = cpus >= 2
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
    let strings = string_library();
    let libraries = [
        library.source.as_str(),
        YARDSTICKS,
        batch.as_str(),
        strings.as_str(),
    ];
    load(&mut con, &libraries, &[]);
    let (acquire_text, release_text) = (Script::Acquire.source(), Script::Release.source());
    let scripts = [acquire_text.as_str(), release_text.as_str(), RSLOCK_UNLOCK];
    let mut sha = |source: &str| -> String {
        redis::cmd("SCRIPT")
            .arg("LOAD")
            .arg(source)
            .query(&mut con)
            .expect("SCRIPT LOAD")
    };
    let [acquire_sha, release_sha, unlock_sha] = scripts.map(&mut sha);

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
    // The string sketch's cycle on lock `i` of 1,000, by functions `take` and `give`: three keys
    // and two arguments, then two keys and one argument.
    let lean = move |i: usize, take: &str, give: &str| {
        let keys = LockKeys::new(&format!("bench-sketch-{}", i % 1000));
        let mut acquire = redis::cmd("FCALL");
        acquire
            .arg(take)
            .arg(3)
            .arg(keys.lock())
            .arg(keys.fence())
            .arg(keys.queue())
            .arg(&*token)
            .arg(LEASE.as_millis() as u64);
        let mut release = redis::cmd("FCALL");
        release
            .arg(give)
            .arg(2)
            .arg(keys.lock())
            .arg(keys.queue())
            .arg(&*token);
        vec![acquire, release]
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
        Variant {
            label: "a sketch, not protocol v1: the lock as one string, fewer keys and arguments, string replies (uncontended path only), 1,000 locks in turn",
            top: &["fcall"],
            cycle: Box::new(move |i| lean(i, "string_acquire", "string_release")),
        },
        Variant {
            label: "FCALL of a function that returns 1, twice, with the string sketch's keys and arguments",
            top: &["fcall"],
            cycle: Box::new(move |i| lean(i, "yard_return", "yard_return")),
        },
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
    let counted = instructions(&variants, &libraries, &scripts);
    let count = |i: usize| counted.as_ref().map_or(f64::NAN, |c| c[i] as f64);

    let mut report = format!(
        "# Where a dlock cycle's time on the Redis server goes\n\n\
         `just bench-scripts` on redis-server {version} ({}, {} CPUs{}): each row is {CYCLES} \
         pipelined cycles, best of {ROUNDS} rounds; the server's time per cycle from `INFO \
         commandstats` (a function's or script's time includes the commands it runs). \
         Commands: per cycle, each with its own time per call. Instructions: the server's, \
         per cycle, counted by callgrind on a redis-server of its own ({}): everything it does \
         for the cycle in user space, reading and parsing the requests and writing the replies \
         included, which commandstats leaves out.\n\n\
         | cycle | server µs per cycle | server instructions per cycle | commands per cycle |\n\
         | --- | ---: | ---: | --- |\n",
        std::env::consts::ARCH,
        cpus,
        if pinned {
            "; the server on the first, this client on the second"
        } else {
            ""
        },
        match &counted {
            Ok(_) => format!("{CYCLES} cycles after {CYCLES} of warm-up"),
            Err(why) => format!("not counted: {why}"),
        },
    );
    for (i, (variant, best)) in variants.iter().zip(&best).enumerate() {
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
        let instructions = match &counted {
            Ok(c) => thousands(c[i]),
            Err(_) => "–".into(),
        };
        report.push_str(&format!(
            "| {} | {per_cycle:.2} | {instructions} | {} |\n",
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
         | the sketch's cycle / rslock's: 100 locks per FCALL | {:.2} |\n\n\
         By the server's instructions per cycle:\n\n\
         | cycle / rslock's cycle | instructions |\n| --- | ---: |\n\
         | two FCALLs of a function that does nothing | {:.2} |\n\
         | the same with the string sketch's keys and arguments (8, not 15) | {:.2} |\n\
         | dlock's ACQUIRE + RELEASE, 1,000 locks | {:.2} |\n\
         | the batch sketch, 10 locks per FCALL | {:.2} |\n\
         | the batch sketch, 100 locks per FCALL | {:.2} |\n\
         | the string sketch, 1,000 locks | {:.2} |\n\n\
         Each key or argument an FCALL takes costs the server about {:.0} instructions (the \
         two empty FCALLs' 15 against 8): parsed from the request, then made a Lua string in \
         the function's KEYS or ARGV.\n",
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
        count(0) / count(8),
        count(12) / count(8),
        count(6) / count(8),
        count(9) / count(8),
        count(10) / count(8),
        count(11) / count(8),
        (count(0) - count(12)) / 7.0,
    ));
    print!("{report}");
    let out = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("results/scripts.md");
    std::fs::write(out, report).expect("writable bench/results");
}
