//! The two ways a function gets its supervisor — the `krm-fn-supervisor`
//! program (spawned with `posix_spawn`) and the in-process fork fallback —
//! behave the same to the caller: the same output, exit codes, deaths by
//! signal and start-up errors, and the same confinement.

mod common;

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use bytes::Bytes;
use krm_fn_runner::adapters::exec::process::{
    Confinement, ProcessError, ProcessLimits, ProcessOutput, ProcessSpec, run_confined,
};
use krm_fn_runner::domain::evaluation::ExitReason;

/// Both ways, the program one first.
fn both() -> [Confinement; 2] {
    [
        Confinement::Program(env!("CARGO_BIN_EXE_krm-fn-supervisor").into()),
        Confinement::InProcess,
    ]
}

fn spec(program: impl Into<PathBuf>, args: &[&str]) -> ProcessSpec {
    ProcessSpec {
        program: program.into(),
        args: args.iter().map(OsString::from).collect(),
        env: vec![("PATH".into(), "/usr/bin:/bin".into())],
        cwd: Some(std::env::temp_dir()),
    }
}

const LIMITS: ProcessLimits = ProcessLimits {
    max_output_bytes: 1 << 20,
    timeout: Some(Duration::from_secs(20)),
};

async fn run(
    confinement: &Confinement,
    spec: &ProcessSpec,
    stdin: &'static [u8],
) -> Result<ProcessOutput, ProcessError> {
    run_confined(spec, Bytes::from_static(stdin), LIMITS, confinement).await
}

fn sh(script: &str) -> ProcessSpec {
    spec("sh", &["-c", script])
}

/// Output, exit codes and signals are relayed unchanged; the function finds
/// its program on the `PATH` it was given, runs in the working directory it
/// was given, in its own process group, with SIGPIPE and every standard
/// signal at its default and no signal blocked, and with its three pipes
/// open (through the program, only those).
#[tokio::test]
async fn both_ways_relay_the_same_results() {
    for c in both() {
        let out = run(&c, &spec("cat", &[]), b"a ResourceList").await.unwrap();
        assert_eq!(out.exit, ExitReason::Code(0), "{c:?}");
        assert_eq!(&out.stdout[..], b"a ResourceList", "{c:?}");

        let out = run(&c, &sh("echo out; echo err >&2; exit 3"), b"")
            .await
            .unwrap();
        assert_eq!(out.exit, ExitReason::Code(3), "{c:?}");
        assert_eq!(&out.stdout[..], b"out\n", "{c:?}");
        assert_eq!(&out.stderr[..], b"err\n", "{c:?}");

        let out = run(&c, &sh("kill -TERM $$"), b"").await.unwrap();
        assert_eq!(out.exit, ExitReason::Signal(libc::SIGTERM), "{c:?}");

        // A function's own 127 and a look-alike report on stderr stay the
        // function's result.
        let out = run(
            &c,
            &sh(
                "printf 'krm-fn-supervisor: cannot start the function: 0123456789abcdef errno 2\\n' >&2; exit 127",
            ),
            b"",
        )
        .await
        .unwrap();
        assert_eq!(out.exit, ExitReason::Code(127), "{c:?}");

        let out = run(
            &c,
            &sh(
                "pwd; ps -o pid=,pgid= -p $$; grep -E '^Sig(Blk|Ign)' /proc/self/status; ls /proc/self/fd",
            ),
            b"",
        )
        .await
        .unwrap();
        let text = String::from_utf8(out.stdout.to_vec()).unwrap();
        let mut lines = text.lines();
        assert_eq!(
            Path::new(lines.next().unwrap()),
            std::env::temp_dir().canonicalize().unwrap(),
            "{c:?}"
        );
        let ids: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
        assert_eq!(ids[0], ids[1], "{c:?}: the function leads its own group");
        assert_eq!(lines.next(), Some("SigBlk:\t0000000000000000"), "{c:?}");
        // Signals 1–31 (SIGPIPE included) at their default; above, the C
        // library's internal ones follow how this test process was started.
        let ignored = lines.next().unwrap().strip_prefix("SigIgn:\t").unwrap();
        let ignored = u64::from_str_radix(ignored, 16).unwrap();
        assert_eq!(ignored & 0x7fff_ffff, 0, "{c:?}: ignored {ignored:x}");
        // The pipes; through the program, nothing else but the directory
        // `ls` has open (the fork also passes on whatever the runner did not
        // mark close-on-exec, such as this test's inherited descriptors).
        let fds: Vec<&str> = lines.collect();
        for fd in ["0", "1", "2"] {
            assert!(fds.contains(&fd), "{c:?}: {fds:?}");
        }
        if let Confinement::Program(_) = c {
            assert_eq!(fds, ["0", "1", "2", "3"], "{c:?}");
        }
    }
}

/// A program that cannot start is the same start-up error both ways, with
/// the `exec` error of the program itself.
#[tokio::test]
async fn both_ways_report_the_same_start_up_errors() {
    let dir = tempfile::tempdir().unwrap();
    let not_executable = dir.path().join("data");
    std::fs::write(&not_executable, "#!/bin/sh\n").unwrap();
    let cases = [
        (
            spec(dir.path().join("missing"), &[]),
            std::io::ErrorKind::NotFound,
        ),
        (spec("no-such-function", &[]), std::io::ErrorKind::NotFound),
        (
            spec(&not_executable, &[]),
            std::io::ErrorKind::PermissionDenied,
        ),
    ];
    for (spec, kind) in cases {
        let mut messages = Vec::new();
        for c in both() {
            match run(&c, &spec, b"input").await {
                Err(e @ ProcessError::Spawn { .. }) => {
                    let ProcessError::Spawn { program, source } = &e else {
                        unreachable!()
                    };
                    assert_eq!(program, &spec.program, "{c:?}");
                    assert_eq!(source.kind(), kind, "{c:?}: {e}");
                    messages.push(e.to_string());
                }
                other => panic!(
                    "{c:?}: {:?}: expected a start-up error, got {other:?}",
                    spec.program
                ),
            }
        }
        assert_eq!(messages[0], messages[1]);
    }
}

/// A supervisor program that is not there is a start-up error naming it.
#[tokio::test]
async fn a_missing_supervisor_program_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("krm-fn-supervisor");
    let err = run(
        &Confinement::Program(missing.clone()),
        &spec("cat", &[]),
        b"",
    )
    .await
    .unwrap_err();
    assert!(
        matches!(&err, ProcessError::Spawn { program, .. } if program == &missing),
        "{err:?}"
    );
}

/// Where the runner looks for the program: next to its executable, or one
/// directory up from cargo's `deps`; `KRM_FN_SUPERVISOR` overrides it.
/// (Run as its own process: the variable is process-wide.)
#[test]
fn the_program_is_found_next_to_the_executable() {
    // This test binary sits in target/<profile>/deps; the program in
    // target/<profile>.
    let (found, why) = Confinement::detect();
    assert_eq!(
        found,
        Confinement::Program(env!("CARGO_BIN_EXE_krm-fn-supervisor").into()),
        "{why:?}"
    );
}

/// `KRM_FN_SUPERVISOR` naming no usable program: the runner still serves,
/// with the in-process supervisor, and its start-up warning names the
/// variable, the path and the problem.
#[test]
fn an_unusable_override_is_a_warning_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.yaml");
    std::fs::write(
        &config,
        "functions:\n- function: /bin/cat\n  images:\n  - example.com/cat:v1\n",
    )
    .unwrap();
    let config = format!("--config={}", config.display());
    let runner = common::Runner::start_with_env(
        &[&config, "--disable-runtimes=pod"],
        &[("KRM_FN_SUPERVISOR", "/nonexistent/krm-fn-supervisor")],
    );
    let log = runner.log();
    assert!(
        log.contains("functions start under a forked copy of this process")
            && log.contains("KRM_FN_SUPERVISOR=/nonexistent/krm-fn-supervisor: No such file"),
        "{log}"
    );
}
