//! `mergetune-lab calibrate` refuses arguments it cannot honour before any work: each error
//! names the flag, and nothing is measured. The default mode (the merge path) refuses the
//! flags only `--end-to-end` reads, which it used to ignore and then exit 0 with a profile;
//! `--end-to-end` checks each value. Run on the built binary: every refusal comes before
//! the check for root, fio and a loop device, so it holds as any user.

fn calibrate(args: &[&str]) -> (Option<i32>, String) {
    let o = crate::lab::lab()
        .arg("calibrate")
        .args(args)
        .output()
        .unwrap();
    (o.status.code(), crate::command::text(&o))
}

#[test]
fn the_default_mode_refuses_the_flags_only_end_to_end_reads() {
    for args in [
        &["--cpu", "9999"][..],
        &["--toggle-runtime-s", "0"],
        &["--reps", "0"],
        &["--toggle-reps", "0"],
        &["--toggle-interval-ms", "0"],
        &["--toggle-scheduler", "kyber"],
        &["--quick", "--no-toggle"],
    ] {
        let (code, said) = calibrate(args);
        let flag = args
            .iter()
            .find(|a| a.starts_with("--") && **a != "--quick")
            .unwrap();
        assert_eq!(code, Some(1), "{args:?}: {said}");
        assert!(
            said.contains(&format!("{flag} applies to --end-to-end only")),
            "{args:?}: {said}"
        );
        assert!(
            !said.contains("calibrate: merge path on"),
            "nothing measured: {said}"
        );
    }
}

#[test]
fn end_to_end_refuses_each_bad_value_naming_its_flag() {
    let ncpu = std::thread::available_parallelism()
        .unwrap()
        .get()
        .to_string();
    for (args, says) in [
        (&["--cpu", "9999"][..], "--cpu: 9999 is not a CPU"),
        (&["--cpu", ncpu.as_str()], "--cpu"),
        (&["--toggle-runtime-s", "0"], "--toggle-runtime-s: 0"),
        (&["--toggle-runtime-s", "nan"], "--toggle-runtime-s: NaN"),
        (&["--toggle-runtime-s", "inf"], "--toggle-runtime-s: inf"),
        (&["--toggle-runtime-s", "1e300"], "--toggle-runtime-s: 1"),
        (&["--reps", "0"], "--reps"),
        (&["--toggle-reps", "0"], "--toggle-reps"),
        (&["--toggle-interval-ms", "0"], "--toggle-interval-ms"),
    ] {
        let mut all = vec!["--end-to-end"];
        all.extend_from_slice(args);
        let (code, said) = calibrate(&all);
        assert_eq!(code, Some(1), "{args:?}: {said}");
        assert!(said.contains(says), "{args:?}: {said}");
        assert!(
            !said.contains("needs root") && !said.contains("not found"),
            "checked first: {said}"
        );
    }
}

/// A scheduler flag takes only a scheduler mergetune knows: refused as a usage error (exit
/// 2) that names the flag and the value, in either mode, before anything else is checked.
#[test]
fn a_scheduler_flag_names_a_scheduler_or_is_a_usage_error() {
    for args in [
        &["--toggle-scheduler", "bogus"][..],
        &["--end-to-end", "--toggle-scheduler", "bogus"],
        &["--schedulers", "none,bogus"],
    ] {
        let (code, said) = calibrate(args);
        assert_eq!(code, Some(2), "{args:?}: {said}");
        assert!(
            said.contains("invalid value 'bogus'") && said.contains("is not a scheduler"),
            "{args:?}: {said}"
        );
        assert!(!said.contains("needs root"), "checked first: {said}");
    }
}
