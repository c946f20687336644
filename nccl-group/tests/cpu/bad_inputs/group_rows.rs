//! The bad-input rows of nccl-group: keys, membership and stores, then
//! every launch variable `RendezvousConfig` reads.

use std::sync::Arc;
use std::time::Duration;

use nccl_group::testing::{DeviceList, Membership};
use nccl_group::{
    GroupOptions, InProcessStore, PrefixStore, ProcessGroup, RendezvousConfig, StoreSpec, TcpStore,
    TcpStoreOptions, TcpStoreServerOptions,
};

use super::store_rows::bind;
use super::{Row, build_with, calls, err};

/// `RendezvousConfig::from_vars` over a valid torchrun environment (rank 1
/// of 4, TCP store at node0:29500) with `changes` applied: `Some` sets a
/// variable, `None` removes it.
fn launch(changes: &[(&str, Option<&str>)]) -> String {
    let mut vars: Vec<(String, String)> = [
        ("RANK", "1"),
        ("WORLD_SIZE", "4"),
        ("MASTER_ADDR", "node0"),
        ("MASTER_PORT", "29500"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    for (name, value) in changes {
        vars.retain(|(k, _)| k != name);
        if let Some(value) = value {
            vars.push((name.to_string(), value.to_string()));
        }
    }
    err(RendezvousConfig::from_vars(|name| {
        vars.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone())
    }))
}

/// Makes the launch a task of a Slurm job step, where Slurm's variables
/// count.
const SLURM_STEP: (&str, Option<&str>) = ("SLURM_STEP_ID", Some("0"));

/// The torchrun variables of [`launch`] removed, for launches of another
/// launcher.
const NOT_TORCHRUN: [(&str, Option<&str>); 4] = [
    ("RANK", None),
    ("WORLD_SIZE", None),
    ("MASTER_ADDR", None),
    ("MASTER_PORT", None),
];

/// [`launch`] of another launcher: the torchrun variables removed, then
/// `changes` applied.
fn launch_without_torchrun(changes: &[(&str, Option<&str>)]) -> String {
    let all: Vec<(&str, Option<&str>)> = NOT_TORCHRUN.iter().chain(changes).copied().collect();
    launch(&all)
}

/// Task 1 of 4 of Slurm job 7's step 0.
const SRUN_TASK: [(&str, Option<&str>); 4] = [
    ("SLURM_JOB_ID", Some("7")),
    ("SLURM_PROCID", Some("1")),
    ("SLURM_NTASKS", Some("4")),
    SLURM_STEP,
];

/// `Membership::join` on a fresh in-process store.
fn join(rank: usize, world_size: usize) -> String {
    err(Membership::join(
        "bad-inputs",
        rank,
        world_size,
        Arc::new(InProcessStore::new()),
        "in-process".to_string(),
        Duration::from_secs(1),
    ))
}

/// The rows of this area, in the order of the Markdown table.
pub fn rows() -> Vec<Row> {
    [
        // ----------------------------------------------------------------
        // nccl_group: keys, membership, stores.
        // ----------------------------------------------------------------
        calls(
            "group",
            "DeviceList::new",
            &[
                (
                    "no devices",
                    &["device list", "expected 1 to 16 tensors", "got 0"],
                    || err(DeviceList::new(std::iter::empty())),
                ),
                (
                    "17 devices",
                    &["device list", "expected 1 to 16 tensors", "got 17"],
                    || err(DeviceList::new(0..17)),
                ),
                (
                    "devices [0, 1, 0]",
                    &[
                        "expected one tensor per device",
                        "got two tensors on device 0",
                    ],
                    || err(DeviceList::new([0, 1, 0].into_iter())),
                ),
            ],
        ),
        calls(
            "group",
            "DeviceList::one",
            &[(
                "ordinal 70000",
                &["expected device ordinals up to 65535", "got 70000"],
                || err(DeviceList::one(70_000)),
            )],
        ),
        calls(
            "group",
            "Membership::join",
            &[
                (
                    "rank 4 of world size 4",
                    &["invalid rank", "expected 0..4", "got 4"],
                    || join(4, 4),
                ),
                (
                    "world size 0",
                    &["invalid rank", "expected 0..0", "got 0"],
                    || join(0, 0),
                ),
                (
                    "world size 2147483648",
                    &["invalid world size", "at most 2147483647", "got 2147483648"],
                    || join(0, 1 << 31),
                ),
            ],
        ),
        calls(
            "group",
            "GroupBuilder::build",
            &[(
                "world size 3 for a name whose first instance had 4",
                &[
                    "invalid world size",
                    "expected 4, the world size of group \"resized\"'s first instance",
                    "give a group of another size another name",
                    "got 3",
                ],
                || {
                    let store: Arc<dyn nccl_group::Store> = Arc::new(InProcessStore::new());
                    let options = GroupOptions::default().without_dump_dir();
                    let new = |rank, world| {
                        ProcessGroup::builder("resized")
                            .rank(rank)
                            .world_size(world)
                            .store(Arc::clone(&store))
                            .options(options.clone())
                            .build()
                    };
                    let first: Vec<_> = (0..4).map(|rank| new(rank, 4)).collect();
                    assert!(first.iter().all(Result::is_ok), "the first instance of 4");
                    err(new(0, 3))
                },
            )],
        ),
        calls(
            "group",
            "PrefixStore::new",
            &[
                (
                    "empty prefix",
                    &["store prefix", "expected a non-empty name without '/'"],
                    || err(PrefixStore::new(InProcessStore::new(), "")),
                ),
                (
                    "prefix \"a/b\"",
                    &[
                        "store prefix \"a/b\"",
                        "expected a non-empty name without '/'",
                    ],
                    || err(PrefixStore::new(InProcessStore::new(), "a/b")),
                ),
            ],
        ),
        calls(
            "group",
            "RendezvousConfig::new",
            &[(
                "world size 2^31",
                &["world_size 2147483648", "above 2147483647", "NCCL accepts"],
                || {
                    err(RendezvousConfig::new(
                        0,
                        1 << 31,
                        StoreSpec::File {
                            dir: "/shared".into(),
                        },
                    ))
                },
            )],
        ),
        calls(
            "group",
            "TcpStoreServer::bind",
            &[(
                "io_timeout Duration::MAX",
                &["io_timeout", "at most 10 years", "default 30 s"],
                || bind(TcpStoreServerOptions::default().with_io_timeout(Duration::MAX)),
            )],
        ),
        calls(
            "group",
            "TcpStore::connect",
            &[(
                "io_margin Duration::MAX",
                &["io_margin", "at most 10 years", "default 10 s"],
                || {
                    err(TcpStore::connect(
                        "127.0.0.1",
                        1,
                        TcpStoreOptions::default().with_io_margin(Duration::MAX),
                    ))
                },
            )],
        ),
        calls(
            "group",
            "GroupBuilder::build",
            &[
                (
                    "recorder_capacity usize::MAX",
                    &[
                        "recorder_capacity",
                        "at most 1048576 records",
                        "18446744073709551615",
                    ],
                    || build_with(GroupOptions::default().with_recorder_capacity(usize::MAX)),
                ),
                (
                    "no store",
                    &[
                        "invalid store",
                        "call .store(Arc<dyn Store>) or .config(&RendezvousConfig)",
                        "got none",
                    ],
                    || {
                        err(ProcessGroup::builder("bad-inputs")
                            .rank(0)
                            .world_size(1)
                            .build())
                    },
                ),
                (
                    "no rank",
                    &["invalid rank", "call .rank(r)", "got none"],
                    || {
                        err(ProcessGroup::builder("bad-inputs")
                            .world_size(1)
                            .store(Arc::new(InProcessStore::new()))
                            .build())
                    },
                ),
                (
                    "no world size",
                    &["invalid world size", "call .world_size(n)", "got none"],
                    || {
                        err(ProcessGroup::builder("bad-inputs")
                            .rank(0)
                            .store(Arc::new(InProcessStore::new()))
                            .build())
                    },
                ),
            ],
        ),
        calls(
            "group",
            "GroupBuilder::join_grown",
            &[(
                "no store",
                &[
                    "invalid store",
                    "call .store(Arc<dyn Store>) or .config(&RendezvousConfig)",
                    "got none",
                ],
                || err(ProcessGroup::builder("bad-inputs").join_grown(Duration::ZERO)),
            )],
        ),
        calls(
            "group",
            "RendezvousConfig::new",
            &[
                (
                    "world size 0",
                    &["world_size 0", "positive integer"],
                    || {
                        err(RendezvousConfig::new(
                            0,
                            0,
                            StoreSpec::File {
                                dir: "/tmp/store".into(),
                            },
                        ))
                    },
                ),
                (
                    "rank 2 of world size 2",
                    &["rank 2", "below world_size 2"],
                    || {
                        err(RendezvousConfig::new(
                            2,
                            2,
                            StoreSpec::File {
                                dir: "/tmp/store".into(),
                            },
                        ))
                    },
                ),
            ],
        ),
        // ----------------------------------------------------------------
        // Launch environment (RendezvousConfig::from_env reads these through
        // from_vars; the base is RANK=1 WORLD_SIZE=4 MASTER_ADDR=node0
        // MASTER_PORT=29500).
        // ----------------------------------------------------------------
        calls(
            "env",
            "RendezvousConfig::from_vars",
            &[
                (
                    "WORLD_SIZE unset (nor SLURM_NTASKS)",
                    &["WORLD_SIZE is not set", "number of processes"],
                    || launch(&[("WORLD_SIZE", None)]),
                ),
                (
                    "WORLD_SIZE=abc",
                    &["WORLD_SIZE=\"abc\"", "positive integer"],
                    || launch(&[("WORLD_SIZE", Some("abc"))]),
                ),
                (
                    "WORLD_SIZE=0",
                    &["WORLD_SIZE=\"0\"", "positive integer"],
                    || launch(&[("WORLD_SIZE", Some("0"))]),
                ),
                (
                    "SLURM_NTASKS=-2 (WORLD_SIZE unset)",
                    &["SLURM_NTASKS=\"-2\"", "positive integer"],
                    || {
                        launch(&[
                            ("WORLD_SIZE", None),
                            ("SLURM_NTASKS", Some("-2")),
                            SLURM_STEP,
                        ])
                    },
                ),
                (
                    "RANK unset (nor SLURM_PROCID)",
                    &["RANK is not set", "0 <= RANK < WORLD_SIZE"],
                    || launch(&[("RANK", None)]),
                ),
                ("RANK=-1", &["RANK=\"-1\"", "non-negative integer"], || {
                    launch(&[("RANK", Some("-1"))])
                }),
                (
                    "RANK=4 with WORLD_SIZE=4",
                    &["RANK=4", "below WORLD_SIZE=4"],
                    || launch(&[("RANK", Some("4"))]),
                ),
                (
                    "SLURM_PROCID=x (RANK unset)",
                    &["SLURM_PROCID=\"x\"", "non-negative integer"],
                    || launch(&[("RANK", None), ("SLURM_PROCID", Some("x")), SLURM_STEP]),
                ),
                (
                    "LOCAL_RANK=one",
                    &["LOCAL_RANK=\"one\"", "non-negative integer"],
                    || launch(&[("LOCAL_RANK", Some("one"))]),
                ),
                (
                    "LOCAL_RANK=4 with WORLD_SIZE=4",
                    &["LOCAL_RANK=4", "below WORLD_SIZE=4"],
                    || launch(&[("LOCAL_RANK", Some("4"))]),
                ),
                (
                    "SLURM_LOCALID=9 (LOCAL_RANK unset)",
                    &["SLURM_LOCALID=9", "below WORLD_SIZE=4"],
                    || launch(&[("SLURM_LOCALID", Some("9")), SLURM_STEP]),
                ),
                (
                    "NCCL_RS_STORE=redis",
                    &["NCCL_RS_STORE=\"redis\"", "\"file:<directory>\""],
                    || launch(&[("NCCL_RS_STORE", Some("redis"))]),
                ),
                (
                    "NCCL_RS_STORE=file: (no directory)",
                    &["NCCL_RS_STORE=\"file:\"", "\"file:<directory>\""],
                    || launch(&[("NCCL_RS_STORE", Some("file:"))]),
                ),
                (
                    "NCCL_RS_STORE=file:shared/dir (relative)",
                    &["NCCL_RS_STORE=\"file:shared/dir\"", "give an absolute path"],
                    || launch(&[("NCCL_RS_STORE", Some("file:shared/dir"))]),
                ),
                (
                    "NCCL_RS_STORE=file:/shared by hand, NCCL_RS_NAMESPACE unset",
                    &["NCCL_RS_STORE=file:/shared", "needs NCCL_RS_NAMESPACE"],
                    || launch(&[("NCCL_RS_STORE", Some("file:/shared"))]),
                ),
                (
                    "NCCL_RS_STORE_TIMEOUT_SECS=0",
                    &[
                        "NCCL_RS_STORE_TIMEOUT_SECS=\"0\"",
                        "positive whole number of seconds",
                    ],
                    || launch(&[("NCCL_RS_STORE_TIMEOUT_SECS", Some("0"))]),
                ),
                (
                    "NCCL_RS_STORE_TIMEOUT_SECS=1.5",
                    &[
                        "NCCL_RS_STORE_TIMEOUT_SECS=\"1.5\"",
                        "positive whole number of seconds",
                    ],
                    || launch(&[("NCCL_RS_STORE_TIMEOUT_SECS", Some("1.5"))]),
                ),
                (
                    "NCCL_RS_STORE_SECRET= (empty)",
                    &["NCCL_RS_STORE_SECRET is set but empty", "non-empty secret"],
                    || launch(&[("NCCL_RS_STORE_SECRET", Some(""))]),
                ),
                (
                    "MASTER_ADDR unset (TCP store)",
                    &["MASTER_ADDR is not set", "host name or IP address"],
                    || launch(&[("MASTER_ADDR", None)]),
                ),
                (
                    "MASTER_ADDR=\"node 0\"",
                    &["MASTER_ADDR=\"node 0\"", "host name or IP address"],
                    || launch(&[("MASTER_ADDR", Some("node 0"))]),
                ),
                (
                    "MASTER_ADDR=[] (empty brackets)",
                    &["MASTER_ADDR=\"[]\"", "host name or IP address"],
                    || launch(&[("MASTER_ADDR", Some("[]"))]),
                ),
                (
                    "MASTER_PORT unset (TCP store)",
                    &["MASTER_PORT is not set", "1-65535"],
                    || launch(&[("MASTER_PORT", None)]),
                ),
                (
                    "MASTER_PORT=0",
                    &["MASTER_PORT=\"0\"", "TCP port number (1-65535)"],
                    || launch(&[("MASTER_PORT", Some("0"))]),
                ),
                (
                    "MASTER_PORT=70000",
                    &["MASTER_PORT=\"70000\"", "TCP port number (1-65535)"],
                    || launch(&[("MASTER_PORT", Some("70000"))]),
                ),
                (
                    "WORLD_SIZE=2147483648 (above NCCL's int)",
                    &[
                        "WORLD_SIZE=\"2147483648\"",
                        "above 2147483647",
                        "NCCL accepts",
                    ],
                    || launch(&[("WORLD_SIZE", Some("2147483648"))]),
                ),
                (
                    "WORLD_SIZE=9223372036854775808 (2^63)",
                    &["WORLD_SIZE=\"9223372036854775808\"", "above 2147483647"],
                    || launch(&[("WORLD_SIZE", Some("9223372036854775808"))]),
                ),
                (
                    "RANK=1 with SLURM_PROCID=7",
                    &["RANK=1 and SLURM_PROCID=7 disagree", "unset one of them"],
                    || launch(&[("SLURM_PROCID", Some("7")), SLURM_STEP]),
                ),
                (
                    "WORLD_SIZE=4 with SLURM_NTASKS=8",
                    &[
                        "WORLD_SIZE=4 and SLURM_NTASKS=8 disagree",
                        "unset one of them",
                    ],
                    || launch(&[("SLURM_NTASKS", Some("8")), SLURM_STEP]),
                ),
                (
                    "LOCAL_RANK=0 with SLURM_LOCALID=3",
                    &[
                        "LOCAL_RANK=0 and SLURM_LOCALID=3 disagree",
                        "unset one of them",
                    ],
                    || {
                        launch(&[
                            ("LOCAL_RANK", Some("0")),
                            ("SLURM_LOCALID", Some("3")),
                            SLURM_STEP,
                        ])
                    },
                ),
                (
                    "LOCAL_WORLD_SIZE=0",
                    &["LOCAL_WORLD_SIZE=\"0\"", "not a positive integer"],
                    || launch(&[("LOCAL_WORLD_SIZE", Some("0"))]),
                ),
                (
                    "LOCAL_WORLD_SIZE=5 with WORLD_SIZE=4",
                    &["LOCAL_WORLD_SIZE=5", "must not exceed WORLD_SIZE=4"],
                    || launch(&[("LOCAL_WORLD_SIZE", Some("5"))]),
                ),
                (
                    "LOCAL_RANK=2 with LOCAL_WORLD_SIZE=2",
                    &["LOCAL_RANK=2", "below LOCAL_WORLD_SIZE=2"],
                    || launch(&[("LOCAL_RANK", Some("2")), ("LOCAL_WORLD_SIZE", Some("2"))]),
                ),
                (
                    "SLURM_PROCID, SLURM_NTASKS in a batch script (SLURM_STEP_ID=-5)",
                    &[
                        "WORLD_SIZE is not set",
                        "SLURM_STEP_ID=\"-5\"",
                        "start the program with srun",
                    ],
                    || {
                        launch_without_torchrun(&[
                            ("SLURM_PROCID", Some("0")),
                            ("SLURM_NTASKS", Some("4")),
                            ("SLURM_STEP_ID", Some("-5")),
                        ])
                    },
                ),
                (
                    "srun task, SLURM_STEP_NODELIST=node[01- (MASTER_ADDR unset)",
                    &[
                        "SLURM_STEP_NODELIST=\"node[01-\"",
                        "at position 8",
                        "such as node[01-04,7]",
                    ],
                    || {
                        let list = [("SLURM_STEP_NODELIST", Some("node[01-"))];
                        launch_without_torchrun(&[SRUN_TASK.as_slice(), &list].concat())
                    },
                ),
                (
                    "srun task, SLURM_STEP_TASKS_PER_NODE=2(x",
                    &["SLURM_STEP_TASKS_PER_NODE=\"2(x\"", "such as 2(x3),1"],
                    || {
                        let counts = [
                            ("SLURM_STEP_TASKS_PER_NODE", Some("2(x")),
                            ("SLURM_NODEID", Some("0")),
                        ];
                        launch_without_torchrun(&[SRUN_TASK.as_slice(), &counts].concat())
                    },
                ),
                (
                    "RANK=1 with OMPI_COMM_WORLD_RANK=2",
                    &[
                        "RANK=1 and OMPI_COMM_WORLD_RANK=2 disagree",
                        "unset one of them",
                    ],
                    || launch(&[("OMPI_COMM_WORLD_RANK", Some("2"))]),
                ),
                (
                    "mpirun rank on 2 hosts, MASTER_ADDR unset",
                    &[
                        "MASTER_ADDR is not set",
                        "2 of the 4 ranks run on this host",
                        "mpirun -x MASTER_ADDR=",
                    ],
                    || {
                        launch_without_torchrun(&[
                            ("OMPI_COMM_WORLD_RANK", Some("1")),
                            ("OMPI_COMM_WORLD_SIZE", Some("4")),
                            ("OMPI_COMM_WORLD_LOCAL_SIZE", Some("2")),
                        ])
                    },
                ),
                (
                    "mpiexec (PMI) on one host, MASTER_PORT unset",
                    &["MASTER_PORT is not set", "mpiexec -genv MASTER_PORT"],
                    || {
                        launch_without_torchrun(&[
                            ("PMI_RANK", Some("1")),
                            ("PMI_SIZE", Some("2")),
                            ("MPI_LOCALNRANKS", Some("2")),
                        ])
                    },
                ),
                (
                    "GROUP_RANK=2 with RANK=1",
                    &["GROUP_RANK=2", "needs RANK >= 2", "but RANK=1"],
                    || launch(&[("GROUP_RANK", Some("2"))]),
                ),
                (
                    "NCCL_RS_NAMESPACE=a/b",
                    &["NCCL_RS_NAMESPACE=\"a/b\"", "A-Z a-z 0-9 . _ -"],
                    || launch(&[("NCCL_RS_NAMESPACE", Some("a/b"))]),
                ),
            ],
        ),
    ]
    .concat()
}
