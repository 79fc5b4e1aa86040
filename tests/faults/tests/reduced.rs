//! The fault suite in its reduced form (one round per scenario), run by `just test`; `just
//! faults` runs it in full. Each scenario starts its own servers and worker processes.

/// Scenarios run at a time. They mostly wait, on leases, sessions and restarts: one at a
/// time the 29 took 204 s, with the CPUs idle four fifths of it.
const JOBS: usize = 3;

#[test]
fn every_scenario_keeps_its_guarantees_for_one_round() {
    let settings = dlock_faults::Settings::reduced(env!("CARGO_BIN_EXE_fault-worker").into());
    let reports = dlock_faults::run_each(&dlock_faults::SCENARIOS, &settings, JOBS);
    let table = dlock_faults::table(&reports);
    println!("{table}");
    for report in &reports {
        assert!(
            report.acquisitions > 0,
            "{}: no acquisitions",
            report.scenario.name
        );
        assert_eq!(
            report.recovery.len(),
            1,
            "{}: one fault",
            report.scenario.name
        );
        assert!(
            report.violations().is_empty(),
            "{}: {:?}\n{table}",
            report.scenario.name,
            report.violations()
        );
    }
}
