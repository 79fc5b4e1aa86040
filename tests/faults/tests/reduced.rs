//! The fault suite in its reduced form (one round per scenario), run by `just test`; `just
//! faults` runs it in full. Each scenario starts its own servers and worker processes.

#[test]
fn every_scenario_keeps_its_guarantees_for_one_round() {
    let settings = dlock_faults::Settings::reduced(env!("CARGO_BIN_EXE_fault-worker").into());
    let mut reports = Vec::new();
    for scenario in dlock_faults::SCENARIOS {
        let report = dlock_faults::run(scenario, &settings);
        eprintln!("{report:?}");
        reports.push(report);
    }
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
