//! The bad-input rows of nccl-group: keys, membership and stores, then
//! every launch variable `RendezvousConfig` reads.

use std::sync::Arc;
use std::time::Duration;

use nccl_group::testing::{DeviceList, Membership};
use nccl_group::{
    GroupOptions, InProcessStore, PrefixStore, ProcessGroup, RendezvousConfig, StoreSpec, TcpStore,
    TcpStoreOptions, TcpStoreServer, TcpStoreServerOptions,
};

use super::{Row, err};

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
    vec![
        // ----------------------------------------------------------------
        // nccl_group: keys, membership, stores.
        // ----------------------------------------------------------------
        Row {
            area: "group",
            call: "DeviceList::new",
            input: "no devices",
            expect: &["device list", "expected 1 to 16 tensors", "got 0"],
            run: || err(DeviceList::new(std::iter::empty())),
        },
        Row {
            area: "group",
            call: "DeviceList::new",
            input: "17 devices",
            expect: &["device list", "expected 1 to 16 tensors", "got 17"],
            run: || err(DeviceList::new(0..17)),
        },
        Row {
            area: "group",
            call: "DeviceList::new",
            input: "devices [0, 1, 0]",
            expect: &[
                "expected one tensor per device",
                "got two tensors on device 0",
            ],
            run: || err(DeviceList::new([0, 1, 0].into_iter())),
        },
        Row {
            area: "group",
            call: "DeviceList::one",
            input: "ordinal 70000",
            expect: &["expected device ordinals up to 65535", "got 70000"],
            run: || err(DeviceList::one(70_000)),
        },
        Row {
            area: "group",
            call: "Membership::join",
            input: "rank 4 of world size 4",
            expect: &["invalid rank", "expected 0..4", "got 4"],
            run: || join(4, 4),
        },
        Row {
            area: "group",
            call: "Membership::join",
            input: "world size 0",
            expect: &["invalid rank", "expected 0..0", "got 0"],
            run: || join(0, 0),
        },
        Row {
            area: "group",
            call: "Membership::join",
            input: "world size 2147483648",
            expect: &["invalid world size", "at most 2147483647", "got 2147483648"],
            run: || join(0, 1 << 31),
        },
        Row {
            area: "group",
            call: "GroupBuilder::build",
            input: "world size 3 for a name whose first instance had 4",
            expect: &[
                "invalid world size",
                "expected 4, the world size of group \"resized\"'s first instance",
                "give a group of another size another name",
                "got 3",
            ],
            run: || {
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
        },
        Row {
            area: "group",
            call: "PrefixStore::new",
            input: "empty prefix",
            expect: &["store prefix", "expected a non-empty name without '/'"],
            run: || err(PrefixStore::new(InProcessStore::new(), "")),
        },
        Row {
            area: "group",
            call: "PrefixStore::new",
            input: "prefix \"a/b\"",
            expect: &[
                "store prefix \"a/b\"",
                "expected a non-empty name without '/'",
            ],
            run: || err(PrefixStore::new(InProcessStore::new(), "a/b")),
        },
        Row {
            area: "group",
            call: "RendezvousConfig::new",
            input: "world size 2^31",
            expect: &["world_size 2147483648", "above 2147483647", "NCCL accepts"],
            run: || {
                err(RendezvousConfig::new(
                    0,
                    1 << 31,
                    StoreSpec::File {
                        dir: "/shared".into(),
                    },
                ))
            },
        },
        Row {
            area: "group",
            call: "TcpStoreServer::bind",
            input: "io_timeout Duration::MAX",
            expect: &["io_timeout", "at most 10 years", "default 30 s"],
            run: || {
                err(TcpStoreServer::bind(
                    "127.0.0.1:0",
                    TcpStoreServerOptions::default().with_io_timeout(Duration::MAX),
                ))
            },
        },
        Row {
            area: "group",
            call: "TcpStore::connect",
            input: "io_margin Duration::MAX",
            expect: &["io_margin", "at most 10 years", "default 10 s"],
            run: || {
                err(TcpStore::connect(
                    "127.0.0.1",
                    1,
                    TcpStoreOptions::default().with_io_margin(Duration::MAX),
                ))
            },
        },
        Row {
            area: "group",
            call: "GroupBuilder::build",
            input: "recorder_capacity usize::MAX",
            expect: &[
                "recorder_capacity",
                "at most 1048576 records",
                "18446744073709551615",
            ],
            run: || {
                err(ProcessGroup::builder("bad-inputs")
                    .rank(0)
                    .world_size(1)
                    .store(Arc::new(InProcessStore::new()))
                    .options(GroupOptions::default().with_recorder_capacity(usize::MAX))
                    .build())
            },
        },
        Row {
            area: "group",
            call: "GroupBuilder::build",
            input: "no store",
            expect: &[
                "invalid store",
                "call .store(Arc<dyn Store>) or .config(&RendezvousConfig)",
                "got none",
            ],
            run: || {
                err(ProcessGroup::builder("bad-inputs")
                    .rank(0)
                    .world_size(1)
                    .build())
            },
        },
        Row {
            area: "group",
            call: "GroupBuilder::build",
            input: "no rank",
            expect: &["invalid rank", "call .rank(r)", "got none"],
            run: || {
                err(ProcessGroup::builder("bad-inputs")
                    .world_size(1)
                    .store(Arc::new(InProcessStore::new()))
                    .build())
            },
        },
        Row {
            area: "group",
            call: "GroupBuilder::build",
            input: "no world size",
            expect: &["invalid world size", "call .world_size(n)", "got none"],
            run: || {
                err(ProcessGroup::builder("bad-inputs")
                    .rank(0)
                    .store(Arc::new(InProcessStore::new()))
                    .build())
            },
        },
        Row {
            area: "group",
            call: "GroupBuilder::join_grown",
            input: "no store",
            expect: &[
                "invalid store",
                "call .store(Arc<dyn Store>) or .config(&RendezvousConfig)",
                "got none",
            ],
            run: || err(ProcessGroup::builder("bad-inputs").join_grown(Duration::ZERO)),
        },
        Row {
            area: "group",
            call: "RendezvousConfig::new",
            input: "world size 0",
            expect: &["world_size 0", "positive integer"],
            run: || {
                err(RendezvousConfig::new(
                    0,
                    0,
                    StoreSpec::File {
                        dir: "/tmp/store".into(),
                    },
                ))
            },
        },
        Row {
            area: "group",
            call: "RendezvousConfig::new",
            input: "rank 2 of world size 2",
            expect: &["rank 2", "below world_size 2"],
            run: || {
                err(RendezvousConfig::new(
                    2,
                    2,
                    StoreSpec::File {
                        dir: "/tmp/store".into(),
                    },
                ))
            },
        },
        // ----------------------------------------------------------------
        // Launch environment (RendezvousConfig::from_env reads these through
        // from_vars; the base is RANK=1 WORLD_SIZE=4 MASTER_ADDR=node0
        // MASTER_PORT=29500).
        // ----------------------------------------------------------------
        Row {
            area: "env",
            call: "RendezvousConfig::from_vars",
            input: "WORLD_SIZE unset (nor SLURM_NTASKS)",
            expect: &["WORLD_SIZE is not set", "number of processes"],
            run: || launch(&[("WORLD_SIZE", None)]),
        },
        Row {
            area: "env",
            call: "RendezvousConfig::from_vars",
            input: "WORLD_SIZE=abc",
            expect: &["WORLD_SIZE=\"abc\"", "positive integer"],
            run: || launch(&[("WORLD_SIZE", Some("abc"))]),
        },
        Row {
            area: "env",
            call: "RendezvousConfig::from_vars",
            input: "WORLD_SIZE=0",
            expect: &["WORLD_SIZE=\"0\"", "positive integer"],
            run: || launch(&[("WORLD_SIZE", Some("0"))]),
        },
        Row {
            area: "env",
            call: "RendezvousConfig::from_vars",
            input: "SLURM_NTASKS=-2 (WORLD_SIZE unset)",
            expect: &["SLURM_NTASKS=\"-2\"", "positive integer"],
            run: || {
                launch(&[
                    ("WORLD_SIZE", None),
                    ("SLURM_NTASKS", Some("-2")),
                    SLURM_STEP,
                ])
            },
        },
        Row {
            area: "env",
            call: "RendezvousConfig::from_vars",
            input: "RANK unset (nor SLURM_PROCID)",
            expect: &["RANK is not set", "0 <= RANK < WORLD_SIZE"],
            run: || launch(&[("RANK", None)]),
        },
        Row {
            area: "env",
            call: "RendezvousConfig::from_vars",
            input: "RANK=-1",
            expect: &["RANK=\"-1\"", "non-negative integer"],
            run: || launch(&[("RANK", Some("-1"))]),
        },
        Row {
            area: "env",
            call: "RendezvousConfig::from_vars",
            input: "RANK=4 with WORLD_SIZE=4",
            expect: &["RANK=4", "below WORLD_SIZE=4"],
            run: || launch(&[("RANK", Some("4"))]),
        },
        Row {
            area: "env",
            call: "RendezvousConfig::from_vars",
            input: "SLURM_PROCID=x (RANK unset)",
            expect: &["SLURM_PROCID=\"x\"", "non-negative integer"],
            run: || launch(&[("RANK", None), ("SLURM_PROCID", Some("x")), SLURM_STEP]),
        },
        Row {
            area: "env",
            call: "RendezvousConfig::from_vars",
            input: "LOCAL_RANK=one",
            expect: &["LOCAL_RANK=\"one\"", "non-negative integer"],
            run: || launch(&[("LOCAL_RANK", Some("one"))]),
        },
        Row {
            area: "env",
            call: "RendezvousConfig::from_vars",
            input: "LOCAL_RANK=4 with WORLD_SIZE=4",
            expect: &["LOCAL_RANK=4", "below WORLD_SIZE=4"],
            run: || launch(&[("LOCAL_RANK", Some("4"))]),
        },
        Row {
            area: "env",
            call: "RendezvousConfig::from_vars",
            input: "SLURM_LOCALID=9 (LOCAL_RANK unset)",
            expect: &["SLURM_LOCALID=9", "below WORLD_SIZE=4"],
            run: || launch(&[("SLURM_LOCALID", Some("9")), SLURM_STEP]),
        },
        Row {
            area: "env",
            call: "RendezvousConfig::from_vars",
            input: "NCCL_RS_STORE=redis",
            expect: &["NCCL_RS_STORE=\"redis\"", "\"file:<directory>\""],
            run: || launch(&[("NCCL_RS_STORE", Some("redis"))]),
        },
        Row {
            area: "env",
            call: "RendezvousConfig::from_vars",
            input: "NCCL_RS_STORE=file: (no directory)",
            expect: &["NCCL_RS_STORE=\"file:\"", "\"file:<directory>\""],
            run: || launch(&[("NCCL_RS_STORE", Some("file:"))]),
        },
        Row {
            area: "env",
            call: "RendezvousConfig::from_vars",
            input: "NCCL_RS_STORE=file:shared/dir (relative)",
            expect: &["NCCL_RS_STORE=\"file:shared/dir\"", "give an absolute path"],
            run: || launch(&[("NCCL_RS_STORE", Some("file:shared/dir"))]),
        },
        Row {
            area: "env",
            call: "RendezvousConfig::from_vars",
            input: "NCCL_RS_STORE=file:/shared by hand, NCCL_RS_NAMESPACE unset",
            expect: &["NCCL_RS_STORE=file:/shared", "needs NCCL_RS_NAMESPACE"],
            run: || launch(&[("NCCL_RS_STORE", Some("file:/shared"))]),
        },
        Row {
            area: "env",
            call: "RendezvousConfig::from_vars",
            input: "NCCL_RS_STORE_TIMEOUT_SECS=0",
            expect: &[
                "NCCL_RS_STORE_TIMEOUT_SECS=\"0\"",
                "positive whole number of seconds",
            ],
            run: || launch(&[("NCCL_RS_STORE_TIMEOUT_SECS", Some("0"))]),
        },
        Row {
            area: "env",
            call: "RendezvousConfig::from_vars",
            input: "NCCL_RS_STORE_TIMEOUT_SECS=1.5",
            expect: &[
                "NCCL_RS_STORE_TIMEOUT_SECS=\"1.5\"",
                "positive whole number of seconds",
            ],
            run: || launch(&[("NCCL_RS_STORE_TIMEOUT_SECS", Some("1.5"))]),
        },
        Row {
            area: "env",
            call: "RendezvousConfig::from_vars",
            input: "NCCL_RS_STORE_SECRET= (empty)",
            expect: &["NCCL_RS_STORE_SECRET is set but empty", "non-empty secret"],
            run: || launch(&[("NCCL_RS_STORE_SECRET", Some(""))]),
        },
        Row {
            area: "env",
            call: "RendezvousConfig::from_vars",
            input: "MASTER_ADDR unset (TCP store)",
            expect: &["MASTER_ADDR is not set", "host name or IP address"],
            run: || launch(&[("MASTER_ADDR", None)]),
        },
        Row {
            area: "env",
            call: "RendezvousConfig::from_vars",
            input: "MASTER_ADDR=\"node 0\"",
            expect: &["MASTER_ADDR=\"node 0\"", "host name or IP address"],
            run: || launch(&[("MASTER_ADDR", Some("node 0"))]),
        },
        Row {
            area: "env",
            call: "RendezvousConfig::from_vars",
            input: "MASTER_ADDR=[] (empty brackets)",
            expect: &["MASTER_ADDR=\"[]\"", "host name or IP address"],
            run: || launch(&[("MASTER_ADDR", Some("[]"))]),
        },
        Row {
            area: "env",
            call: "RendezvousConfig::from_vars",
            input: "MASTER_PORT unset (TCP store)",
            expect: &["MASTER_PORT is not set", "1-65535"],
            run: || launch(&[("MASTER_PORT", None)]),
        },
        Row {
            area: "env",
            call: "RendezvousConfig::from_vars",
            input: "MASTER_PORT=0",
            expect: &["MASTER_PORT=\"0\"", "TCP port number (1-65535)"],
            run: || launch(&[("MASTER_PORT", Some("0"))]),
        },
        Row {
            area: "env",
            call: "RendezvousConfig::from_vars",
            input: "MASTER_PORT=70000",
            expect: &["MASTER_PORT=\"70000\"", "TCP port number (1-65535)"],
            run: || launch(&[("MASTER_PORT", Some("70000"))]),
        },
        Row {
            area: "env",
            call: "RendezvousConfig::from_vars",
            input: "WORLD_SIZE=2147483648 (above NCCL's int)",
            expect: &[
                "WORLD_SIZE=\"2147483648\"",
                "above 2147483647",
                "NCCL accepts",
            ],
            run: || launch(&[("WORLD_SIZE", Some("2147483648"))]),
        },
        Row {
            area: "env",
            call: "RendezvousConfig::from_vars",
            input: "WORLD_SIZE=9223372036854775808 (2^63)",
            expect: &["WORLD_SIZE=\"9223372036854775808\"", "above 2147483647"],
            run: || launch(&[("WORLD_SIZE", Some("9223372036854775808"))]),
        },
        Row {
            area: "env",
            call: "RendezvousConfig::from_vars",
            input: "RANK=1 with SLURM_PROCID=7",
            expect: &["RANK=1 and SLURM_PROCID=7 disagree", "unset one of them"],
            run: || launch(&[("SLURM_PROCID", Some("7")), SLURM_STEP]),
        },
        Row {
            area: "env",
            call: "RendezvousConfig::from_vars",
            input: "WORLD_SIZE=4 with SLURM_NTASKS=8",
            expect: &[
                "WORLD_SIZE=4 and SLURM_NTASKS=8 disagree",
                "unset one of them",
            ],
            run: || launch(&[("SLURM_NTASKS", Some("8")), SLURM_STEP]),
        },
        Row {
            area: "env",
            call: "RendezvousConfig::from_vars",
            input: "LOCAL_RANK=0 with SLURM_LOCALID=3",
            expect: &[
                "LOCAL_RANK=0 and SLURM_LOCALID=3 disagree",
                "unset one of them",
            ],
            run: || {
                launch(&[
                    ("LOCAL_RANK", Some("0")),
                    ("SLURM_LOCALID", Some("3")),
                    SLURM_STEP,
                ])
            },
        },
        Row {
            area: "env",
            call: "RendezvousConfig::from_vars",
            input: "LOCAL_WORLD_SIZE=0",
            expect: &["LOCAL_WORLD_SIZE=\"0\"", "not a positive integer"],
            run: || launch(&[("LOCAL_WORLD_SIZE", Some("0"))]),
        },
        Row {
            area: "env",
            call: "RendezvousConfig::from_vars",
            input: "LOCAL_WORLD_SIZE=5 with WORLD_SIZE=4",
            expect: &["LOCAL_WORLD_SIZE=5", "must not exceed WORLD_SIZE=4"],
            run: || launch(&[("LOCAL_WORLD_SIZE", Some("5"))]),
        },
        Row {
            area: "env",
            call: "RendezvousConfig::from_vars",
            input: "LOCAL_RANK=2 with LOCAL_WORLD_SIZE=2",
            expect: &["LOCAL_RANK=2", "below LOCAL_WORLD_SIZE=2"],
            run: || launch(&[("LOCAL_RANK", Some("2")), ("LOCAL_WORLD_SIZE", Some("2"))]),
        },
        Row {
            area: "env",
            call: "RendezvousConfig::from_vars",
            input: "SLURM_PROCID, SLURM_NTASKS in a batch script (SLURM_STEP_ID=-5)",
            expect: &[
                "WORLD_SIZE is not set",
                "SLURM_STEP_ID=\"-5\"",
                "start the program with srun",
            ],
            run: || {
                launch_without_torchrun(&[
                    ("SLURM_PROCID", Some("0")),
                    ("SLURM_NTASKS", Some("4")),
                    ("SLURM_STEP_ID", Some("-5")),
                ])
            },
        },
        Row {
            area: "env",
            call: "RendezvousConfig::from_vars",
            input: "srun task, SLURM_STEP_NODELIST=node[01- (MASTER_ADDR unset)",
            expect: &[
                "SLURM_STEP_NODELIST=\"node[01-\"",
                "at position 8",
                "such as node[01-04,7]",
            ],
            run: || {
                let list = [("SLURM_STEP_NODELIST", Some("node[01-"))];
                launch_without_torchrun(&[SRUN_TASK.as_slice(), &list].concat())
            },
        },
        Row {
            area: "env",
            call: "RendezvousConfig::from_vars",
            input: "srun task, SLURM_STEP_TASKS_PER_NODE=2(x",
            expect: &["SLURM_STEP_TASKS_PER_NODE=\"2(x\"", "such as 2(x3),1"],
            run: || {
                let counts = [
                    ("SLURM_STEP_TASKS_PER_NODE", Some("2(x")),
                    ("SLURM_NODEID", Some("0")),
                ];
                launch_without_torchrun(&[SRUN_TASK.as_slice(), &counts].concat())
            },
        },
        Row {
            area: "env",
            call: "RendezvousConfig::from_vars",
            input: "RANK=1 with OMPI_COMM_WORLD_RANK=2",
            expect: &[
                "RANK=1 and OMPI_COMM_WORLD_RANK=2 disagree",
                "unset one of them",
            ],
            run: || launch(&[("OMPI_COMM_WORLD_RANK", Some("2"))]),
        },
        Row {
            area: "env",
            call: "RendezvousConfig::from_vars",
            input: "mpirun rank on 2 hosts, MASTER_ADDR unset",
            expect: &[
                "MASTER_ADDR is not set",
                "2 of the 4 ranks run on this host",
                "mpirun -x MASTER_ADDR=",
            ],
            run: || {
                launch_without_torchrun(&[
                    ("OMPI_COMM_WORLD_RANK", Some("1")),
                    ("OMPI_COMM_WORLD_SIZE", Some("4")),
                    ("OMPI_COMM_WORLD_LOCAL_SIZE", Some("2")),
                ])
            },
        },
        Row {
            area: "env",
            call: "RendezvousConfig::from_vars",
            input: "mpiexec (PMI) on one host, MASTER_PORT unset",
            expect: &["MASTER_PORT is not set", "mpiexec -genv MASTER_PORT"],
            run: || {
                launch_without_torchrun(&[
                    ("PMI_RANK", Some("1")),
                    ("PMI_SIZE", Some("2")),
                    ("MPI_LOCALNRANKS", Some("2")),
                ])
            },
        },
        Row {
            area: "env",
            call: "RendezvousConfig::from_vars",
            input: "GROUP_RANK=2 with RANK=1",
            expect: &["GROUP_RANK=2", "needs RANK >= 2", "but RANK=1"],
            run: || launch(&[("GROUP_RANK", Some("2"))]),
        },
        Row {
            area: "env",
            call: "RendezvousConfig::from_vars",
            input: "NCCL_RS_NAMESPACE=a/b",
            expect: &["NCCL_RS_NAMESPACE=\"a/b\"", "A-Z a-z 0-9 . _ -"],
            run: || launch(&[("NCCL_RS_NAMESPACE", Some("a/b"))]),
        },
    ]
}
