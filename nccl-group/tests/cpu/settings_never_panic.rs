//! Every duration option of the stores, tried at its boundary values (0,
//! 1 ms, 1 s, `u32::MAX` and `u64::MAX` seconds, `Duration::MAX`): each is
//! accepted and works, or is refused with an error naming it; none panics,
//! in the caller or in a server thread. A client timeout shorter than
//! [`PATIENCE`] may also run out on a loaded machine: then the client
//! gives up with a timeout of the store's, which is no failure here. Then
//! the launch variables at their bounds and in random mixes (host lists,
//! task counts, namespaces included), and the flight recorder's capacity at
//! its bound.

use nccl_group::Diagnostics;
use nccl_group::Lifecycle;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::time::Duration;

use nccl_group::recorder::MAX_RECORDER_CAPACITY;
use nccl_group::{
    FileStore, GroupError, GroupOptions, InProcessStore, MAX_CHECK_INTERVAL, ProcessGroup,
    RendezvousConfig, Store, StoreError, TcpStore, TcpStoreOptions, TcpStoreServer,
    TcpStoreServerOptions,
};

const BOUNDARIES: [Duration; 6] = [
    Duration::ZERO,
    Duration::from_millis(1),
    Duration::from_secs(1),
    Duration::from_secs(u32::MAX as u64),
    Duration::from_secs(u64::MAX),
    Duration::MAX,
];

/// Timeouts that only a hung peer outlasts, however loaded the machine;
/// shorter client timeouts may run out before an answer comes.
const PATIENCE: Duration = Duration::from_secs(60);

/// Client options whose every time limit is [`PATIENCE`], so that only the
/// option a case sets can run out.
fn patient_client() -> TcpStoreOptions {
    TcpStoreOptions::default()
        .with_timeout(PATIENCE)
        .with_connect_timeout(PATIENCE)
        .with_io_margin(PATIENCE)
}

/// Runs `f`, failing the test if it panics.
fn no_panic<T>(what: &str, f: impl FnOnce() -> T) -> T {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|_| panic!("{what} panicked"))
}

/// An error refusing option `what`, by name.
fn assert_names(err: &StoreError, what: &str) {
    match err {
        StoreError::InvalidArgument { what: named, .. } => assert_eq!(*named, what, "{err}"),
        other => panic!("expected {what} to be refused by name, got {other:?}"),
    }
}

/// A set and a get on `store`, the get reading what the set stored (a
/// server thread that panicked would have closed the connection instead).
fn round_trip(store: &dyn Store, what: &str) -> Result<(), StoreError> {
    store.set("k", b"v")?;
    assert_eq!(store.get("k", PATIENCE)?, b"v", "{what}");
    Ok(())
}

/// Whether `err` is a TCP client giving up on its own short timeout
/// (`value`, below [`PATIENCE`]): the server did not answer, or could not
/// be reached, in time. A closed connection (a server thread that
/// panicked) or a refusal never is.
fn ran_out(err: &StoreError, value: Duration) -> bool {
    value < PATIENCE
        && matches!(
            err,
            StoreError::Unresponsive { .. } | StoreError::Connect { .. }
        )
}

#[test]
fn server_io_timeout_is_used_or_refused_by_name() {
    for io_timeout in BOUNDARIES {
        let what = format!("io_timeout {io_timeout:?}");
        no_panic(&what, || {
            let opts = TcpStoreServerOptions::default().with_io_timeout(io_timeout);
            match TcpStoreServer::bind("127.0.0.1:0", opts) {
                Err(e) => assert_names(&e, "io_timeout"),
                // 0 counts as 1 ms, too short for a dependable round trip.
                Ok(_) if io_timeout < Duration::from_secs(1) => {}
                Ok(server) => {
                    let client = TcpStore::connect_to(server.connect_addr(), patient_client())
                        .unwrap_or_else(|e| panic!("{what}: connect failed: {e}"));
                    round_trip(&client, &what)
                        .unwrap_or_else(|e| panic!("{what}: round trip failed: {e}"));
                    drop(client);
                    drop(server);
                }
            }
        });
    }
    let err = TcpStoreServer::bind(
        "127.0.0.1:0",
        TcpStoreServerOptions::default().with_io_timeout(Duration::MAX),
    )
    .unwrap_err();
    assert!(
        err.to_string().contains("io_timeout") && err.to_string().contains("at most 10 years"),
        "{err}"
    );
}

#[test]
fn client_durations_are_used_or_refused_by_name() {
    let server = TcpStoreServer::bind("127.0.0.1:0", TcpStoreServerOptions::default()).unwrap();
    type Setter = fn(TcpStoreOptions, Duration) -> TcpStoreOptions;
    let options: [(&str, Setter); 3] = [
        ("timeout", TcpStoreOptions::with_timeout),
        ("connect_timeout", TcpStoreOptions::with_connect_timeout),
        ("io_margin", TcpStoreOptions::with_io_margin),
    ];
    for (name, set) in options {
        for value in BOUNDARIES {
            let what = format!("{name} {value:?}");
            no_panic(&what, || {
                let opts = set(patient_client(), value);
                let result = TcpStore::connect_to(server.connect_addr(), opts)
                    .and_then(|store| round_trip(&store, &what));
                match result {
                    Ok(()) => {}
                    Err(e @ StoreError::InvalidArgument { .. }) => assert_names(&e, name),
                    Err(e) if ran_out(&e, value) => {}
                    Err(e) => panic!("{what}: unexpected error {e}"),
                }
            });
        }
    }
}

#[test]
fn file_store_durations_never_panic() {
    let dir = tempfile::tempdir().unwrap();
    for value in BOUNDARIES {
        let what = format!("file store durations {value:?}");
        no_panic(&what, || {
            let store = FileStore::open(dir.path(), value)
                .unwrap()
                .with_lock_timeout(value.max(Duration::from_secs(1)))
                .with_poll_interval(value);
            round_trip(&store, &what).unwrap_or_else(|e| panic!("{what}: round trip failed: {e}"));
            assert_eq!(store.default_timeout(), value);
        });
    }
}

/// Every numeric launch variable `RendezvousConfig` reads.
const LAUNCH_NUMBERS: [&str; 23] = [
    "WORLD_SIZE",
    "RANK",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
    "OMPI_COMM_WORLD_RANK",
    "OMPI_COMM_WORLD_SIZE",
    "OMPI_COMM_WORLD_LOCAL_RANK",
    "OMPI_COMM_WORLD_LOCAL_SIZE",
    "PMI_RANK",
    "PMI_ID",
    "PMI_SIZE",
    "MPI_LOCALRANKID",
    "MPI_LOCALNRANKS",
    "PMI_LOCAL_RANK",
    "PMI_LOCAL_SIZE",
    "SLURM_PROCID",
    "SLURM_NTASKS",
    "SLURM_LOCALID",
    "SLURM_NODEID",
    "SLURM_STEP_ID",
    "TORCHELASTIC_RESTART_COUNT",
    "NCCL_RS_STORE_TIMEOUT_SECS",
];

/// `from_vars` over `vars` (the last of a name wins), which must not panic;
/// an error must name a variable that is set, or one that is missing.
fn read_launch(what: &str, vars: &[(&str, String)]) -> Result<RendezvousConfig, StoreError> {
    let read = no_panic(what, || {
        RendezvousConfig::from_vars(|n| {
            vars.iter()
                .rev()
                .find(|(k, _)| *k == n)
                .map(|(_, v)| v.clone())
        })
    });
    match &read {
        Ok(c) => {
            assert!(
                c.world_size <= i32::MAX as usize && c.rank < c.world_size,
                "{what}"
            );
            let local_bound = c.local_world_size.unwrap_or(c.world_size);
            assert!(
                c.local_rank < local_bound && local_bound <= c.world_size,
                "{what}"
            );
            assert!(
                !c.namespace.is_empty() && !c.namespace.contains('/'),
                "{what}"
            );
        }
        Err(StoreError::Config { var, message }) => {
            // NCCL_RS_NAMESPACE: a file store without a launcher's job id.
            let missing = [
                "RANK",
                "WORLD_SIZE",
                "MASTER_ADDR",
                "MASTER_PORT",
                "NCCL_RS_NAMESPACE",
            ];
            assert!(
                vars.iter().any(|(k, _)| k == var) || missing.contains(&var.as_str()),
                "{what}: named {var}: {message}"
            );
            assert!(message.contains(var.as_str()), "{what}: {message}");
        }
        Err(e) => panic!("{what}: unexpected error {e}"),
    }
    read
}

#[test]
fn launch_variables_at_their_bounds_never_panic() {
    let numbers = [
        "0",
        "1",
        "2147483647",
        "2147483648",
        "4294967295",
        "9223372036854775808",
        "18446744073709551615",
        "18446744073709551616",
    ];
    for name in LAUNCH_NUMBERS {
        for value in numbers {
            let what = format!("{name}={value}");
            let vars = [
                ("RANK", "0".to_owned()),
                ("WORLD_SIZE", "2147483647".to_owned()),
                ("SLURM_STEP_ID", "0".to_owned()),
                ("NCCL_RS_STORE", "file:/tmp/x".to_owned()),
                (name, value.to_owned()),
            ];
            read_launch(&what, &vars).ok();
        }
    }
}

/// A small deterministic generator (xorshift64*), so a failure replays.
struct Draw(u64);

impl Draw {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 33) as usize % n
    }

    fn pick<'a>(&mut self, from: &[&'a str]) -> &'a str {
        from[self.below(from.len())]
    }
}

#[test]
fn any_mix_of_launch_variables_reads_without_panicking() {
    let values = [
        "0",
        "1",
        "2",
        "3",
        "7",
        "8",
        "",
        " ",
        "-1",
        "+2",
        "x",
        "2147483648",
        "18446744073709551616",
        "4294967290",
        "-5",
        "n[01-04,7]",
        "a[1-2],b3",
        "rack[1-2]-n[01-02]",
        "n[0-65535]x[0-65535]",
        "n[0-18446744073709551615]",
        "n[",
        "n]",
        "[",
        "]]",
        "n[1,]",
        "2(x3),1",
        "1(x18446744073709551615)",
        "2(x",
        "(x)",
        "10.0.0.1",
        "[::1]",
        "prterun-host-1@1",
        "a/b",
        "none",
        "\u{fffd}\u{0}",
    ];
    let names: Vec<&str> = LAUNCH_NUMBERS
        .iter()
        .copied()
        .chain([
            "TORCHELASTIC_RUN_ID",
            "SLURM_STEPID",
            "SLURM_JOB_ID",
            "SLURM_RESTART_COUNT",
            "SLURM_STEP_TASKS_PER_NODE",
            "SLURM_STEP_NODELIST",
            "SLURM_NODELIST",
            "SLURM_JOB_NODELIST",
            "SLURM_LAUNCH_NODE_IPADDR",
            "OMPI_MCA_ess_base_jobid",
            "PMIX_NAMESPACE",
            "MASTER_ADDR",
            "MASTER_PORT",
            "NCCL_RS_NAMESPACE",
        ])
        .collect();
    // Each case starts from a launch that reads, of one launcher or none,
    // and adds variables at random.
    let bases: [&[(&str, &str)]; 5] = [
        &[],
        &[
            ("RANK", "1"),
            ("WORLD_SIZE", "4"),
            ("MASTER_ADDR", "h"),
            ("MASTER_PORT", "1"),
        ],
        &[
            ("SLURM_STEP_ID", "0"),
            ("SLURM_JOB_ID", "5"),
            ("SLURM_PROCID", "1"),
            ("SLURM_NTASKS", "4"),
            ("SLURM_STEP_NODELIST", "n[1-2]"),
        ],
        &[
            ("OMPI_COMM_WORLD_RANK", "1"),
            ("OMPI_COMM_WORLD_SIZE", "4"),
            ("OMPI_COMM_WORLD_LOCAL_SIZE", "4"),
            ("OMPI_MCA_ess_base_jobid", "9"),
        ],
        &[
            ("PMI_RANK", "1"),
            ("PMI_SIZE", "2"),
            ("MPI_LOCALNRANKS", "2"),
            ("MASTER_PORT", "3"),
        ],
    ];
    let mut draw = Draw(0x9e37_79b9_7f4a_7c15);
    let mut read = 0;
    for case in 0..4000 {
        let base = bases[draw.below(bases.len())];
        let added = draw.below(7);
        let vars: Vec<(&str, String)> = base
            .iter()
            .map(|(k, v)| (*k, (*v).to_owned()))
            .chain((0..added).map(|_| (draw.pick(&names), draw.pick(&values).to_owned())))
            .collect();
        let what = format!("case {case}: {vars:?}");
        let launched = no_panic(&what, || {
            RendezvousConfig::detect_launcher(|n| {
                vars.iter()
                    .rev()
                    .find(|(k, _)| *k == n)
                    .map(|(_, v)| v.clone())
            })
        });
        let result = read_launch(&what, &vars);
        // A process with no launch variables runs alone: `from_vars` has
        // nothing to read it from.
        if launched.is_none() {
            assert!(result.is_err(), "{what}: read without a launch");
        }
        read += usize::from(result.is_ok());
    }
    // About a quarter of the mixes read (1086 of 4000 when written): both
    // the accepted and the refused paths are exercised.
    assert!(
        read >= 400,
        "only {read} mixes read: the generator is too harsh"
    );
}

#[test]
fn a_huge_recorder_capacity_is_refused_by_name() {
    for capacity in [MAX_RECORDER_CAPACITY + 1, usize::MAX] {
        let what = format!("recorder_capacity {capacity}");
        let made = no_panic(&what, || {
            ProcessGroup::builder("huge-recorder")
                .rank(0)
                .world_size(1)
                .store(Arc::new(InProcessStore::new()))
                .options(GroupOptions::default().with_recorder_capacity(capacity))
                .build()
        });
        match made {
            Err(GroupError::InvalidArgument {
                argument, given, ..
            }) => {
                assert_eq!(argument, "recorder_capacity");
                assert_eq!(given, capacity.to_string());
            }
            other => panic!("{what}: expected a refusal, got {:?}", other.map(|_| ())),
        }
    }
}

#[test]
fn collective_checks_outside_1_to_1024_are_refused_by_name() {
    let join = |every: u32| {
        let what = format!("collective_checks {every}");
        let options = GroupOptions::default()
            .with_collective_checks(every)
            .without_dump_dir();
        let made = no_panic(&what, || {
            ProcessGroup::builder("checks")
                .rank(0)
                .world_size(1)
                .store(Arc::new(InProcessStore::new()))
                .options(options)
                .build()
        });
        (what, made)
    };
    for every in [0, MAX_CHECK_INTERVAL + 1, u32::MAX] {
        match join(every) {
            (
                _,
                Err(GroupError::InvalidArgument {
                    argument, given, ..
                }),
            ) => {
                assert_eq!(argument, "collective_checks");
                assert_eq!(given, every.to_string());
            }
            (what, other) => panic!("{what}: expected a refusal, got {:?}", other.map(|_| ())),
        }
    }
    for every in [1, 16, MAX_CHECK_INTERVAL] {
        let (what, made) = join(every);
        let group = made.unwrap_or_else(|e| panic!("{what}: {e}"));
        assert_eq!(group.options().collective_checks, Some(every));
    }
}

#[test]
fn group_durations_at_their_bounds_never_panic() {
    for duration in BOUNDARIES {
        let what = format!("a group with every timeout {duration:?}");
        no_panic(&what, || {
            let options = GroupOptions::default()
                .with_timeout(duration)
                .with_op_timeout(duration)
                .with_abort_timeout(duration)
                .without_dump_dir();
            let store: Arc<dyn Store> = Arc::new(InProcessStore::new());
            let group = ProcessGroup::builder("bounds")
                .rank(0)
                .world_size(1)
                .store(store)
                .options(options)
                .build()
                .unwrap_or_else(|e| panic!("{what}: {e}"));
            let handle = group.with_op_timeout(duration);
            assert_eq!(handle.op_timeout(), duration);
            assert_eq!(group.pending_operations(), 0);
            // Abort twice: the second finds the group no longer live. A
            // zero abort timeout may report the abort as stalled, by design.
            for aborted in [group.abort(), handle.abort()] {
                match aborted {
                    Ok(()) | Err(GroupError::AbortStalled { .. }) => {}
                    Err(e) => panic!("{what}: abort: {e}"),
                }
            }
            assert!(matches!(group.destroy(), Err(GroupError::Aborted { .. })));
        });
    }
}
