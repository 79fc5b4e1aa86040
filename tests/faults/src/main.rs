//! `just faults [ROUNDS] [SCENARIO…]`: the whole fault suite, several rounds per scenario; prints
//! the table, writes it to tests/faults/results/latest.md (and, for a run of every scenario,
//! into docs/SAFETY.md), and fails if any scenario broke a guarantee.

use std::path::Path;

fn main() {
    let mut args = std::env::args().skip(1);
    let worker = std::env::current_exe()
        .expect("the running executable")
        .with_file_name("fault-worker");
    let mut settings = dlock_faults::Settings::full(worker);
    if let Some(rounds) = args.next() {
        settings.rounds = rounds.parse().expect("ROUNDS is a number");
    }
    let only: Vec<String> = args.collect();
    let scenarios: Vec<_> = dlock_faults::SCENARIOS
        .into_iter()
        .filter(|s| only.is_empty() || only.iter().any(|o| o == s.name))
        .collect();
    let reports = dlock_faults::run_each(&scenarios, &settings, 1);
    let table = dlock_faults::table(&reports);
    println!("{table}");
    let machine = format!(
        "{} CPUs, lease {} ms, ZooKeeper session {} ms, {} workers, {} ms between a tenure's two writes",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        settings.lease.as_millis(),
        settings.session_timeout.as_millis(),
        settings.workers,
        settings.hold.as_millis()
    );
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let results = repo.join("tests/faults/results");
    std::fs::create_dir_all(&results).expect("a results dir");
    std::fs::write(
        results.join("latest.md"),
        format!("# Fault suite: latest full run\n\n{machine}.\n\n{table}"),
    )
    .expect("writable results");
    if only.is_empty() {
        let safety = repo.join("docs/SAFETY.md");
        let doc = std::fs::read_to_string(&safety).expect("docs/SAFETY.md");
        let (head, rest) = doc
            .split_once("<!-- faults:start -->")
            .expect("a start marker");
        let (_, tail) = rest
            .split_once("<!-- faults:end -->")
            .expect("an end marker");
        let doc = format!("{head}<!-- faults:start -->\n{table}<!-- faults:end -->{tail}");
        std::fs::write(&safety, doc).expect("writable docs/SAFETY.md");
    }
    if reports.iter().any(|r| !r.violations().is_empty()) {
        std::process::exit(1);
    }
}
