//! One worker of the fault suite (`dlock-faults`), run as its own OS process so the nemesis
//! can pause it (SIGSTOP), kill it (SIGKILL) or cut it off.
//!
//! `fault-worker LOCK_URL RESOURCE_URL NAME DIR LABEL LEASE_MS HOLD_MS fenced|unfenced
//! LOCK_DELAY_MS lock|election` acquires lock NAME over and over until DIR/stop appears — or,
//! with `election`, campaigns in the election NAME (its value the LABEL), each term a tenure
//! whose token is the term, ended by resigning. Each tenure
//! writes `pid token` to DIR/holder, makes a fenced write to the resource (a Redis hash on
//! RESOURCE_URL, never faulted) at once, and HOLD_MS after the acquisition (however long the
//! first write took, paused or not) a second one — whatever it was told about its lock in
//! the meantime, like a process that was paused mid-way — then releases. `unfenced` (the
//! control) writes each tenure to a key of its own, which no fence can protect. Every step is
//! appended to DIR/LABEL.log as it happens (CLOCK_MONOTONIC nanoseconds), so the log
//! survives a kill:
//!
//! ```text
//! acq TOKEN T            the lock was acquired
//! write TOKEN T 1|0|e    a fenced write sent at T: accepted, refused as stale, or failed
//! woke TOKEN T           the wait between the two writes is over
//! lost TOKEN T REASON    the client said the lock was lost
//! rel TOKEN T ok|err     the release returned
//! fail T ERROR           an acquire failed (e.g. the server was down)
//! ```

use std::fs::File;
use std::io::Write as _;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use dlock::FencedWrite;

fn monotonic_ns() -> u64 {
    dlock_faults::monotonic_ns()
}

fn log(file: &File, line: String) {
    // One write per line on an O_APPEND file: lines from the lost-watcher task and the main
    // loop never interleave, and each is on disk before the next step (a kill keeps them).
    (&*file)
        .write_all(format!("{line}\n").as_bytes())
        .expect("writable log");
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [
        lock_url,
        resource_url,
        name,
        dir,
        label,
        lease,
        hold,
        fencing,
        lock_delay,
        mode,
    ] = args.as_slice()
    else {
        panic!(
            "usage: fault-worker LOCK_URL RESOURCE_URL NAME DIR LABEL LEASE_MS HOLD_MS fenced|unfenced LOCK_DELAY_MS lock|election"
        );
    };
    let election = match mode.as_str() {
        "lock" => false,
        "election" => true,
        other => panic!("lock or election, not {other:?}"),
    };
    let lock_delay = Duration::from_millis(lock_delay.parse().expect("LOCK_DELAY_MS"));
    let fenced = match fencing.as_str() {
        "fenced" => true,
        "unfenced" => false,
        other => panic!("fenced or unfenced, not {other:?}"),
    };
    let dir = PathBuf::from(dir);
    let lease = Duration::from_millis(lease.parse().expect("LEASE_MS"));
    let hold = Duration::from_millis(hold.parse().expect("HOLD_MS"));
    let log_file = Arc::new(
        File::options()
            .create(true)
            .append(true)
            .open(dir.join(format!("{label}.log")))
            .expect("log file"),
    );
    let resource = dlock::Client::connect(resource_url)
        .await
        .expect("the resource server is up");
    let client = loop {
        match dlock::Client::builder(lock_url)
            .lock_delay(lock_delay)
            .connect()
            .await
        {
            Ok(client) => break client,
            Err(e) => {
                log(&log_file, format!("fail {} {e}", monotonic_ns()));
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    };
    std::fs::write(dir.join(format!("{label}.ready")), "").expect("writable dir");
    let resource_key = format!("faults:{name}");
    while !dir.join("stop").exists() {
        let wait = Duration::from_secs(2);
        let acquired = if election {
            let election = client.election(name.as_str()).lease(lease).wait(wait);
            election.campaign(label.as_str()).await.map(Tenure::Leads)
        } else {
            let lock = client.lock(name.as_str()).lease(lease).wait(wait);
            lock.acquire()
                .await
                .map(|guard| Tenure::Holds(guard.into()))
        };
        let guard = match acquired {
            Ok(guard) => guard,
            Err(e) if e.is_timeout() => continue,
            Err(e) => {
                log(&log_file, format!("fail {} {e}", monotonic_ns()));
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let acquired_at = tokio::time::Instant::now();
        let token = guard.token();
        log(&log_file, format!("acq {token} {}", monotonic_ns()));
        let holder = dir.join(format!("{label}.holder"));
        std::fs::write(&holder, format!("{} {token}", std::process::id())).expect("writable");
        std::fs::rename(&holder, dir.join("holder")).expect("renamable");
        let signal = guard.lost_signal();
        let watcher_log = log_file.clone();
        tokio::spawn(async move {
            if let Some(reason) = signal.wait().await {
                log(
                    &watcher_log,
                    format!("lost {token} {} {reason:?}", monotonic_ns()),
                );
            }
        });
        let key = if fenced {
            resource_key.clone()
        } else {
            format!("{resource_key}:{token}")
        };
        for step in 0..2 {
            if step == 1 {
                tokio::time::sleep_until(acquired_at + hold).await;
                // Before the second write's send time is read: a nemesis that finds this
                // line knows it is too late to pause the tenure before that write.
                log(&log_file, format!("woke {token} {}", monotonic_ns()));
            }
            let sent = monotonic_ns();
            let outcome = match resource
                .fenced_write(&key, token, &format!("{label} {token} {step}"))
                .await
            {
                Ok(FencedWrite::Written) => "1",
                Ok(FencedWrite::Stale { .. }) => "0",
                Err(_) => "e",
            };
            log(&log_file, format!("write {token} {sent} {outcome}"));
        }
        let released = guard.end().await;
        let outcome = if released.is_ok() { "ok" } else { "err" };
        log(
            &log_file,
            format!("rel {token} {} {outcome}", monotonic_ns()),
        );
    }
}

/// One tenure: a held lock, or a term of leadership.
enum Tenure {
    Holds(dlock::SharedGuard),
    Leads(dlock::Leadership),
}

impl Tenure {
    fn token(&self) -> u64 {
        match self {
            Tenure::Holds(guard) => guard.fencing_token(),
            Tenure::Leads(lead) => lead.term(),
        }
    }

    fn lost_signal(&self) -> dlock::LostSignal {
        match self {
            Tenure::Holds(guard) => guard.lost_signal().clone(),
            Tenure::Leads(lead) => lead.lost_signal(),
        }
    }

    /// Releases the lock, or resigns.
    async fn end(self) -> Result<(), dlock::Error> {
        match self {
            Tenure::Holds(guard) => guard.release().await,
            Tenure::Leads(lead) => lead.resign().await,
        }
    }
}
