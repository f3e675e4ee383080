//! The three ways a function gets its supervisor — a per-call process forked
//! by the resident `krm-fn-supervisor --resident` (the default), the
//! `krm-fn-supervisor` program spawned per call with `posix_spawn`, and the
//! in-process fork fallback — behave the same to the caller: the same
//! output, exit codes, deaths by signal and start-up errors, and the same
//! confinement.

use krm_fn_testbed::common;

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use bytes::Bytes;
use krm_fn_runner::adapters::exec::process::{
    Confinement, ProcessError, ProcessLimits, ProcessOutput, ProcessSpec, run_confined,
};
use krm_fn_runner::domain::evaluation::ExitReason;

fn program() -> PathBuf {
    env!("CARGO_BIN_EXE_krm-fn-supervisor").into()
}

/// Every way: resident, per-call program, in-process.
fn every_way() -> [Confinement; 3] {
    [
        Confinement::Resident(program()),
        Confinement::Program(program()),
        Confinement::InProcess,
    ]
}

fn spec(program: impl Into<PathBuf>, args: &[&str]) -> ProcessSpec {
    ProcessSpec {
        program: program.into(),
        args: args.iter().map(OsString::from).collect(),
        env: vec![("PATH".into(), "/usr/bin:/bin".into())],
        cwd: Some(std::env::temp_dir()),
        sandbox: Default::default(),
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
async fn every_way_relays_the_same_results() {
    for c in every_way() {
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
        if !matches!(c, Confinement::InProcess) {
            assert_eq!(fds, ["0", "1", "2", "3"], "{c:?}");
        }
    }
}

/// A program that cannot start is the same start-up error every way, with
/// the `exec` error of the program itself.
#[tokio::test]
async fn every_way_reports_the_same_start_up_errors() {
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
        for c in every_way() {
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
        assert_eq!(messages[0], messages[2]);
    }
}

/// A supervisor program that is not there is a start-up error naming it,
/// resident or per call.
#[tokio::test]
async fn a_missing_supervisor_program_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("krm-fn-supervisor");
    for c in [
        Confinement::Resident(missing.clone()),
        Confinement::Program(missing.clone()),
    ] {
        let err = run(&c, &spec("cat", &[]), b"").await.unwrap_err();
        assert!(
            matches!(&err, ProcessError::Spawn { program, .. } if program == &missing),
            "{c:?}: {err:?}"
        );
    }
}

/// The processes whose command line contains `marker`, the supervisors'
/// own excepted.
fn left(marker: &str) -> Vec<u32> {
    common::processes_matching(marker)
}

/// A function (a script in `dir`) that starts a `setsid` child, a
/// double-forked grandchild and a plain child, sleeping `tag`1..3 seconds,
/// and waits: three processes whose command line holds `sleep TAG/10`.
fn lingering(dir: &Path, tag: u32) -> ProcessSpec {
    let path = common::script(
        dir,
        &format!("linger-{tag}"),
        &format!(
            "#!/bin/sh
setsid sleep {tag}1 </dev/null >/dev/null 2>&1 &
sh -c 'sleep {tag}2 &'
sleep {tag}3 &
wait
"
        ),
    );
    spec(path, &[])
}

/// A call that is dropped — its timeout passed, or the caller's future was
/// dropped (a cancelled request) — ends the function and every descendant,
/// whatever session it moved to, every way; the timeout is the same
/// [`ProcessError::TimedOut`].
#[tokio::test(flavor = "multi_thread")]
async fn a_dropped_call_ends_the_whole_function_tree() {
    let dir = tempfile::tempdir().unwrap();
    for (i, c) in every_way().into_iter().enumerate() {
        let tag = 64_410 + 10 * i as u32;
        let marker = format!("sleep {}", tag / 10);
        let limits = ProcessLimits {
            max_output_bytes: 1 << 20,
            timeout: Some(Duration::from_millis(1500)),
        };
        let started = std::time::Instant::now();
        let err = match run_confined(&lingering(dir.path(), tag), Bytes::new(), limits, &c).await {
            Err(e) => e,
            Ok(out) => panic!("{c:?}: expected a timeout, got {out:?}"),
        };
        assert!(
            matches!(err, ProcessError::TimedOut(t) if t == Duration::from_millis(1500)),
            "{c:?}: {err:?}"
        );
        assert!(started.elapsed() < Duration::from_secs(5), "{c:?}");
        assert!(
            common::wait_until(Duration::from_secs(5), || left(&marker).is_empty()),
            "{c:?}: after the timeout: {:?}",
            left(&marker)
        );

        let tag = tag + 5;
        let marker = format!("sleep {}", tag / 10);
        let function = lingering(dir.path(), tag);
        let call = run(&c, &function, b"");
        let dropped = tokio::time::timeout(Duration::from_millis(1500), call).await;
        assert!(dropped.is_err(), "{c:?}: the call ended by itself");
        assert!(
            common::wait_until(Duration::from_secs(5), || left(&marker).is_empty()),
            "{c:?}: after the call was dropped: {:?}",
            left(&marker)
        );
    }
}

/// The resident supervisor started from `program` for this test process.
fn resident_pid(program: &Path) -> Option<u32> {
    // Its spares and per-call children carry the same command line: the
    // resident one is the child of this process.
    resident_family(program).into_iter().find(|pid| {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|s| {
                s.rsplit(')')
                    .next()?
                    .split_whitespace()
                    .nth(1)?
                    .parse()
                    .ok()
            })
            == Some(std::process::id())
    })
}

/// The program under a path of its own in a new directory (a symbolic
/// link: a copy written while other tests fork could be "text file busy"
/// when started), and a resident supervisor of its own (apart from the one
/// the other tests share) started by a first call.
async fn resident_of_its_own() -> (tempfile::TempDir, PathBuf, Confinement) {
    let dir = tempfile::tempdir().unwrap();
    let copy = dir.path().join("krm-fn-supervisor");
    std::os::unix::fs::symlink(program(), &copy).unwrap();
    let c = Confinement::Resident(copy.clone());
    let out = run(&c, &spec("cat", &[]), b"warm").await.unwrap();
    assert_eq!(&out.stdout[..], b"warm");
    (dir, copy, c)
}

/// Sends SIGKILL to the resident supervisor started from `program`;
/// returns its pid.
fn kill_resident(program: &Path) -> u32 {
    let resident = resident_pid(program).expect("a resident supervisor");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(resident as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    resident
}

/// Killing the resident supervisor (SIGKILL) while calls run: each fails
/// with [`ProcessError::SupervisorLost`], whose message says what happened,
/// their functions and every descendant end, and the next call starts a
/// new resident supervisor and succeeds.
#[tokio::test(flavor = "multi_thread")]
async fn a_killed_resident_supervisor_fails_its_calls_clearly_and_is_restarted() {
    let (dir, copy, c) = resident_of_its_own().await;
    let tag = 65_410;
    let marker = format!("sleep {}", tag / 10);
    let function = lingering(dir.path(), tag);
    let calls: Vec<_> = (0..3)
        .map(|_| {
            let (c, function) = (c.clone(), function.clone());
            tokio::spawn(async move { run(&c, &function, b"").await })
        })
        .collect();
    assert!(
        common::wait_until(Duration::from_secs(10), || left(&marker).len() == 9),
        "{:?}",
        left(&marker)
    );
    let resident = kill_resident(&copy);
    for call in calls {
        let err = tokio::time::timeout(Duration::from_secs(10), call)
            .await
            .expect("the call ends")
            .unwrap()
            .unwrap_err();
        assert!(matches!(err, ProcessError::SupervisorLost), "{err:?}");
        let text = err.to_string();
        assert!(
            text.contains("supervisor") && text.contains("killed or crashed"),
            "{text}"
        );
    }
    assert!(
        common::wait_until(Duration::from_secs(5), || left(&marker).is_empty()),
        "{:?}",
        left(&marker)
    );
    // Its spares, idle or serving a call, went with it.
    assert!(
        common::wait_until(Duration::from_secs(5), || resident_family(&copy).is_empty()),
        "{:?}",
        resident_family(&copy)
    );
    let out = run(&c, &spec("cat", &[]), b"again").await.unwrap();
    assert_eq!(&out.stdout[..], b"again");
    let restarted = resident_pid(&copy).expect("a new resident supervisor");
    assert_ne!(restarted, resident);
}

/// Every process started from `program --resident` for this test process:
/// the resident supervisor, its spares and its per-call supervisors.
fn resident_family(program: &Path) -> Vec<u32> {
    let me = format!("{} --resident {}", program.display(), std::process::id());
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .map(|c| String::from_utf8_lossy(&c).replace('\0', " ").contains(&me))
                .unwrap_or(false)
                && common::alive(*pid)
        })
        .collect()
}

/// The resident supervisor keeps pre-forked spares waiting for calls
/// (`KRM_FN_SUPERVISOR_SPARES`, 2 by default); killing it (SIGKILL) while
/// they are idle ends them too, and the next call starts a new resident
/// supervisor with new spares and succeeds.
#[tokio::test(flavor = "multi_thread")]
async fn idle_spares_end_with_a_killed_resident_supervisor() {
    let (_dir, copy, c) = resident_of_its_own().await;
    // The resident supervisor and its idle spares: the 2 it keeps, and the
    // one that served the first call, back in the pool.
    assert!(
        common::wait_until(Duration::from_secs(5), || resident_family(&copy).len() >= 3),
        "{:?}",
        resident_family(&copy)
    );
    let resident = kill_resident(&copy);
    assert!(
        common::wait_until(Duration::from_secs(5), || resident_family(&copy).is_empty()),
        "spares outlived the resident supervisor: {:?}",
        resident_family(&copy)
    );
    let out = run(&c, &spec("cat", &[]), b"again").await.unwrap();
    assert_eq!(&out.stdout[..], b"again");
    assert_ne!(resident_pid(&copy), Some(resident));
}

/// A spare serves call after call, and nothing of one call is left for the
/// next: sequential calls with a working directory and environment of their
/// own alternate with calls that give neither (the function then runs in
/// the runner's directory, without the other call's variable), and every
/// function sees only its three pipes. With three spares in the pool,
/// eight calls give some spare (the function's parent) several of them.
#[tokio::test(flavor = "multi_thread")]
async fn a_spare_serves_call_after_call_and_keeps_nothing_of_the_last() {
    let (dir, _copy, c) = resident_of_its_own().await;
    let script = "echo $PPID; pwd; echo \"${FOO-unset}\"; ls /proc/self/fd | tr '\\n' ' '";
    let own_place = ProcessSpec {
        env: vec![
            ("PATH".into(), "/usr/bin:/bin".into()),
            ("FOO".into(), "first".into()),
        ],
        cwd: Some(dir.path().to_path_buf()),
        ..sh(script)
    };
    let no_place = ProcessSpec {
        cwd: None,
        ..sh(script)
    };
    let here = std::env::current_dir().unwrap().canonicalize().unwrap();
    let mut parents = std::collections::HashMap::<String, usize>::new();
    for i in 0..8 {
        let (spec, place, foo) = if i % 2 == 0 {
            (&own_place, dir.path().canonicalize().unwrap(), "first")
        } else {
            (&no_place, here.clone(), "unset")
        };
        let out = run(&c, spec, b"").await.unwrap();
        assert_eq!(out.exit, ExitReason::Code(0), "call {i}: {out:?}");
        let text = String::from_utf8(out.stdout.to_vec()).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(Path::new(lines[1]), place, "call {i}: {text}");
        assert_eq!(lines[2], foo, "call {i}: {text}");
        // 0, 1, 2 and the directory `ls` reads.
        let fds: Vec<&str> = lines[3].split_whitespace().collect();
        assert_eq!(fds.len(), 4, "call {i}: {text}");
        assert_eq!(&fds[..3], ["0", "1", "2"], "call {i}: {text}");
        *parents.entry(lines[0].to_string()).or_default() += 1;
    }
    assert!(
        parents.values().any(|&n| n > 1),
        "no spare served more than one call: {parents:?}"
    );
}

/// A function can change its supervisor from outside (same user:
/// `renice`, `prlimit`, `chrt`, `taskset` on its parent); that supervisor
/// then ends after the call instead of passing the change on: the calls
/// after it run with the nice value, scheduling policy, open-file limit and
/// CPUs of those before it, under other supervisors. Each change alone.
#[tokio::test(flavor = "multi_thread")]
async fn a_supervisor_a_function_changed_serves_no_more_calls() {
    let (_dir, _copy, c) = resident_of_its_own().await;
    let report = "echo $PPID; cut -d' ' -f19,41 /proc/self/stat; ulimit -n; grep Cpus_allowed_list /proc/self/status";
    let values = |out: ProcessOutput| {
        let text = String::from_utf8(out.stdout.to_vec()).unwrap();
        let lines: Vec<String> = text.lines().map(str::to_string).collect();
        assert_eq!(
            lines.len(),
            4,
            "{text} {:?}",
            String::from_utf8_lossy(&out.stderr)
        );
        (lines[0].clone(), lines[1..].to_vec())
    };
    let (_, before) = values(run(&c, &sh(report), b"").await.unwrap());
    for change in [
        "renice -n 7 -p $PPID >/dev/null",
        "prlimit --pid $PPID --nofile=100:100",
        "chrt --idle -p 0 $PPID",
        "taskset -p 1 $PPID >/dev/null",
    ] {
        let out = run(&c, &sh(&format!("{change} && echo $PPID")), b"")
            .await
            .unwrap();
        assert_eq!(out.exit, ExitReason::Code(0), "{change}: {out:?}");
        let changed = String::from_utf8(out.stdout.to_vec())
            .unwrap()
            .trim()
            .to_string();
        for i in 0..4 {
            let (parent, after) = values(run(&c, &sh(report), b"").await.unwrap());
            assert_ne!(
                parent, changed,
                "{change}, call {i}: the changed supervisor served again"
            );
            assert_eq!(after, before, "{change}, call {i}");
        }
    }
}

/// Output far beyond the room reserved for it from the input's size (a
/// 1-byte input, a 1 MiB output: the limit exactly) is read whole, every
/// way; one byte more is the output limit's error.
#[tokio::test]
async fn output_beyond_the_reserved_room_is_read_whole_up_to_the_limit() {
    let limit = LIMITS.max_output_bytes;
    for c in every_way() {
        let out = run(&c, &sh(&format!("head -c {limit} /dev/zero")), b"x")
            .await
            .unwrap();
        assert_eq!(out.exit, ExitReason::Code(0), "{c:?}");
        assert_eq!(out.stdout.len(), limit, "{c:?}");
        assert!(out.stdout.iter().all(|&b| b == 0), "{c:?}");
        let over = run(&c, &sh(&format!("head -c {} /dev/zero", limit + 1)), b"x").await;
        assert!(
            matches!(over, Err(ProcessError::OutputTooLarge { limit: l, .. }) if l == limit),
            "{c:?}: {over:?}"
        );
    }
}

/// The scheduling policy of the process that runs `cut` in a function (a
/// child of the function's shell, which inherits it): field 41 of its
/// `/proc/<pid>/stat`.
async fn function_policy(c: &Confinement) -> String {
    let out = run(c, &sh("cut -d' ' -f41 /proc/self/stat"), b"")
        .await
        .unwrap();
    assert_eq!(out.exit, ExitReason::Code(0), "{c:?}: {out:?}");
    String::from_utf8(out.stdout.to_vec())
        .unwrap()
        .trim()
        .to_string()
}

/// Every way runs the function, and what it starts, under `SCHED_BATCH`
/// (policy 3) when the runner runs under the normal policy, while the
/// runner itself stays under it (0).
#[tokio::test]
async fn every_way_runs_the_function_as_batch_work() {
    for c in every_way() {
        assert_eq!(function_policy(&c).await, "3", "{c:?}");
    }
    // SAFETY: a query of this thread's policy.
    assert_eq!(unsafe { libc::sched_getscheduler(0) }, libc::SCHED_OTHER);
}

/// A runner started under another policy (`SCHED_IDLE` here, 5) passes it
/// on unchanged: `SCHED_BATCH` would raise it. Through the per-call program
/// and the in-process fork, started from a thread under `SCHED_IDLE` (a
/// resident supervisor's spares run the function the way the per-call
/// program does, through the same start; one started from this thread would
/// make the test need far more CPU at the idle policy's tiny share, a hang
/// risk when the other tests load the machine).
#[test]
fn a_runner_under_another_policy_passes_it_on() {
    std::thread::spawn(|| {
        // SAFETY: an all-zero value is priority 0.
        let param: libc::sched_param = unsafe { std::mem::zeroed() };
        assert_eq!(
            // SAFETY: sets this thread's own policy; the thread ends here.
            unsafe { libc::sched_setscheduler(0, libc::SCHED_IDLE, &param) },
            0
        );
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            for c in [Confinement::Program(program()), Confinement::InProcess] {
                assert_eq!(function_policy(&c).await, "5", "{c:?}");
            }
        });
    })
    .join()
    .unwrap();
}

/// Spares beyond the 2 the resident supervisor keeps idle (those that
/// served a burst of calls) end once no call came for them for 5 seconds,
/// so the pool shrinks back after load.
#[tokio::test(flavor = "multi_thread")]
async fn spares_beyond_the_wanted_number_end_when_idle() {
    let (_dir, copy, c) = resident_of_its_own().await;
    let calls: Vec<_> = (0..8)
        .map(|_| {
            let c = c.clone();
            tokio::spawn(async move { run(&c, &sh("sleep 0.5"), b"").await })
        })
        .collect();
    for call in calls {
        assert_eq!(call.await.unwrap().unwrap().exit, ExitReason::Code(0));
    }
    let grown = resident_family(&copy).len();
    assert!(grown >= 9, "the pool did not grow with the calls: {grown}");
    assert!(
        common::wait_until(Duration::from_secs(15), || resident_family(&copy).len()
            == 3),
        "{:?}",
        resident_family(&copy)
    );
    let out = run(&c, &spec("cat", &[]), b"after").await.unwrap();
    assert_eq!(&out.stdout[..], b"after");
}

/// Many calls at once through the resident supervisor each get their own
/// input back, exit code and stderr: 48 calls, far more than its 2 spares,
/// so most wait for a spare to be forked again (or for the resident
/// process to serve them itself).
#[tokio::test(flavor = "multi_thread")]
async fn concurrent_calls_through_the_resident_supervisor_stay_apart() {
    let c = Confinement::Resident(program());
    let calls: Vec<_> = (0..48)
        .map(|i| {
            let c = c.clone();
            tokio::spawn(async move {
                let script = format!("cat; echo {i} >&2; exit {}", i % 7);
                let input = format!("input {i} ").repeat(1000 * (i % 5 + 1));
                let out = run_confined(&sh(&script), Bytes::from(input.clone()), LIMITS, &c)
                    .await
                    .unwrap();
                assert_eq!(out.stdout, input.as_bytes(), "call {i}");
                assert_eq!(out.stderr, format!("{i}\n").as_bytes(), "call {i}");
                assert_eq!(out.exit, ExitReason::Code((i % 7) as i32), "call {i}");
            })
        })
        .collect();
    for call in calls {
        call.await.unwrap();
    }
}

/// Where the runner looks for the program: next to its executable, or one
/// directory up from cargo's `deps`; `KRM_FN_SUPERVISOR` overrides it.
/// (Run as its own process: the variable is process-wide.)
#[test]
fn the_program_is_found_next_to_the_executable() {
    // This test binary sits in target/<profile>/deps; the program in
    // target/<profile>.
    let (found, why) = Confinement::detect();
    assert_eq!(found, Confinement::Resident(program()), "{why:?}");
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

/// An unusable `KRM_FN_SUPERVISOR_SPARES` is named in a warning at start-up
/// and the resident supervisor keeps the default 2 spares.
#[tokio::test(flavor = "multi_thread")]
async fn a_bad_spares_value_is_a_warning_and_the_default_is_kept() {
    let dir = tempfile::tempdir().unwrap();
    let config = common::catalog_config_with(dir.path(), &[]);
    let runner = common::Runner::start_with_env(
        &["--config", &config, "--disable-runtimes=pod"],
        &[("KRM_FN_SUPERVISOR_SPARES", "lots")],
    );
    let resident = format!(" --resident {} ", runner.pid());
    let cmdline = common::eventually("the resident supervisor", Duration::from_secs(10), || {
        let found = std::fs::read_dir("/proc").unwrap().flatten().find_map(|e| {
            let c = std::fs::read(e.path().join("cmdline")).ok()?;
            let c = String::from_utf8_lossy(&c).replace('\0', " ");
            c.contains(&resident).then_some(c)
        });
        async move { found }
    })
    .await;
    assert!(cmdline.trim_end().ends_with(" 2"), "{cmdline}");
    let warned = common::wait_until(Duration::from_secs(10), || {
        let log = runner.log();
        log.contains("KRM_FN_SUPERVISOR_SPARES=\"lots\" is not a number from 0 to 16")
            && log.contains("keeping 2 spare function supervisors")
    });
    assert!(warned, "{}", runner.log());
}

/// The call's timeout covers handing the call to the resident supervisor:
/// with one that never reads its control socket, calls whose requests no
/// longer fit in the socket's buffer end with the timeout instead of
/// waiting for room forever.
#[tokio::test(flavor = "multi_thread")]
async fn the_timeout_covers_handing_the_call_to_the_resident_supervisor() {
    let dir = tempfile::tempdir().unwrap();
    // Never reads its control socket; ends with the test process
    // (argv: --resident RUNNER_PID SPARES).
    let deaf = common::script(
        dir.path(),
        "deaf-supervisor",
        "#!/bin/sh\nwhile kill -0 \"$2\" 2>/dev/null; do sleep 0.1; done\n",
    );
    let c = Confinement::Resident(deaf);
    // About 48 KiB per request (the largest sent whole is 64 KiB), so the
    // socket's buffer fills after a few.
    let mut big = spec("cat", &[]);
    big.env.push(("PAD".into(), "x".repeat(48 << 10).into()));
    let limits = ProcessLimits {
        max_output_bytes: 1 << 20,
        timeout: Some(Duration::from_millis(300)),
    };
    let calls = (0..32).map(|_| {
        let (big, c) = (big.clone(), c.clone());
        tokio::spawn(async move { run_confined(&big, Bytes::new(), limits, &c).await })
    });
    let all = futures_all(calls.collect());
    let results = tokio::time::timeout(Duration::from_secs(20), all)
        .await
        .expect("a call outlived its timeout waiting to be handed over");
    for r in results {
        assert!(
            matches!(r, Err(ProcessError::TimedOut(_))),
            "{:?}",
            r.map(|o| o.exit)
        );
    }
}

/// Awaits every task in order.
async fn futures_all<T>(tasks: Vec<tokio::task::JoinHandle<T>>) -> Vec<T> {
    let mut out = Vec::new();
    for t in tasks {
        out.push(t.await.unwrap());
    }
    out
}

/// `krm-fn-runner serve` as PID 1 of a new PID namespace (as in a
/// container), with the environment `env`, serving the script `echo` (which
/// copies its input) written into `dir`; returns it and its pid as seen
/// from here.
fn pid_1_server(dir: &Path, env: &[(String, String)]) -> (common::Runner, u32) {
    common::script(dir, "echo", "#!/bin/sh\ncat\n");
    let config = common::catalog_config_with(dir, &["echo"]);
    let args: Vec<String> = [
        "--pid",
        "--fork",
        "--mount-proc",
        "--kill-child",
        common::runner_binary().to_str().unwrap(),
        "serve",
        "--config",
        &config,
        "--disable-runtimes=pod",
        "--listen",
        "127.0.0.1:0",
    ]
    .map(String::from)
    .into();
    let runner = common::Runner::start_program(Path::new("unshare"), &args, env);
    let [(server, _)] = common::children_of(runner.pid())[..] else {
        panic!("{:?}", common::children_of(runner.pid()));
    };
    (runner, server)
}

/// An EvaluateFunction call of `echo` through `runner` that must succeed.
async fn echo(runner: &common::Runner, name: &str) {
    use krm_fn_runner::adapters::grpc::pb::EvaluateFunctionRequest;
    let out = runner
        .client()
        .await
        .evaluate_function(EvaluateFunctionRequest {
            tag: String::new(),
            resource_list: common::config_map_rl(name).into(),
            image: "example.com/test/echo:v1".into(),
        })
        .await
        .unwrap_or_else(|e| panic!("call {name}: {e:?}"))
        .into_inner();
    let text = String::from_utf8_lossy(&out.resource_list);
    assert!(text.contains(&format!("name: {name}\n")), "{text}");
}

/// A server that is PID 1 (of a new PID namespace, as in a container)
/// reaps the orphans it inherits: after its resident supervisor is killed
/// (SIGKILL), the spares and the resident supervisor itself are gone
/// within a bounded wait, none left a zombie; the server stays up and the
/// next EvaluateFunction call succeeds through a new resident supervisor.
#[tokio::test(flavor = "multi_thread")]
async fn a_server_that_is_pid_1_reaps_the_spares_of_a_killed_resident_supervisor() {
    let dir = tempfile::tempdir().unwrap();
    let (runner, server) = pid_1_server(dir.path(), &[]);
    // The resident supervisor (`--resident 1 2`) and its 2 idle spares.
    let resident = common::eventually("the resident supervisor", Duration::from_secs(10), || {
        let found = common::children_of(server).into_iter().find(|&(pid, _)| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| String::from_utf8_lossy(&c).contains("--resident\x001\x00"))
        });
        async move { found.map(|(pid, _)| pid) }
    })
    .await;
    assert!(
        common::wait_until(Duration::from_secs(10), || common::children_of(resident)
            .len()
            == 2),
        "{:?}",
        common::children_of(resident)
    );
    let spares: Vec<u32> = common::children_of(resident)
        .into_iter()
        .map(|(p, _)| p)
        .collect();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(resident as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    let gone = |pid: &u32| !Path::new(&format!("/proc/{pid}")).exists();
    assert!(
        common::wait_until(Duration::from_secs(10), || {
            gone(&resident) && spares.iter().all(gone)
        }),
        "left behind by the server (pid, zombie): {:?}",
        common::children_of(server)
    );
    assert!(
        common::children_of(server)
            .iter()
            .all(|&(_, zombie)| !zombie),
        "{:?}",
        common::children_of(server)
    );
    echo(&runner, "after").await;
    assert!(common::alive(server));
    assert!(
        common::children_of(server)
            .iter()
            .all(|&(_, zombie)| !zombie)
    );
}

/// A server that is PID 1 reaps only the orphans it inherits, never the
/// supervisors it starts itself and waits for: with one supervisor process
/// per call (`KRM_FN_SUPERVISOR=per-call`) or a forked copy of itself
/// (`in-process`), 64 calls, 16 at a time, each get their function's
/// output and exit status, and no zombie is left.
#[tokio::test(flavor = "multi_thread")]
async fn a_server_that_is_pid_1_keeps_the_exit_status_of_its_own_children() {
    for way in ["per-call", "in-process"] {
        let dir = tempfile::tempdir().unwrap();
        let env = [("KRM_FN_SUPERVISOR".to_string(), way.to_string())];
        let (runner, server) = pid_1_server(dir.path(), &env);
        let runner = std::sync::Arc::new(runner);
        for round in 0..4 {
            let calls: Vec<_> = (0..16)
                .map(|i| {
                    let runner = runner.clone();
                    tokio::spawn(async move { echo(&runner, &format!("{way}-{round}-{i}")).await })
                })
                .collect();
            futures_all(calls).await;
        }
        assert!(
            common::wait_until(Duration::from_secs(5), || {
                common::children_of(server)
                    .iter()
                    .all(|&(_, zombie)| !zombie)
            }),
            "{way}: {:?}",
            common::children_of(server)
        );
    }
}
