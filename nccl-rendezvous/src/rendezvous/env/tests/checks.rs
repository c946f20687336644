//! The checks on the values read, every message, and the documented table.

use std::collections::HashMap;
use std::time::Duration;

use super::super::sources::QUANTITIES;
use super::{BASE, ErrorCase, base, cfg, err, with};
use crate::DEFAULT_TIMEOUT;
use crate::rendezvous::{Launcher, RendezvousConfig, StoreSpec};

#[test]
fn torchrun_variables_and_defaults() {
    let c = cfg(&base(
        &[
            ("LOCAL_RANK", "1"),
            ("NCCL_RS_STORE_TIMEOUT_SECS", "42"),
            ("NCCL_RS_STORE_SECRET", "s3cret"),
        ],
        &[],
    ))
    .unwrap();
    assert_eq!((c.rank, c.world_size, c.local_rank), (1, 4, 1));
    assert_eq!(
        c.store,
        StoreSpec::Tcp {
            addr: "127.0.0.1".into(),
            port: 29500
        }
    );
    assert_eq!(c.timeout, Duration::from_secs(42));
    assert_eq!(c.secret.as_deref(), Some("s3cret"));
    let dbg = format!("{c:?}");
    assert!(
        !dbg.contains("s3cret") && dbg.contains("<redacted>"),
        "{dbg}"
    );
    let c = cfg(&BASE).unwrap();
    assert_eq!(
        (c.local_rank, c.local_world_size, c.node_rank),
        (0, None, None)
    );
    assert_eq!((c.timeout, c.secret), (DEFAULT_TIMEOUT, None));
    assert_eq!(
        (c.launcher, c.namespace.as_str()),
        (Launcher::Manual, "manual")
    );
}

#[test]
fn group_rank_is_checked_against_torchrun_numbering() {
    let c = cfg(&base(&[("GROUP_RANK", "1"), ("LOCAL_RANK", "0")], &[])).unwrap();
    assert_eq!(c.node_rank, Some(1));
    let (var, msg) = err(&base(&[("GROUP_RANK", "1"), ("LOCAL_RANK", "1")], &[]));
    assert_eq!(var, "GROUP_RANK");
    assert_eq!(
        msg,
        "GROUP_RANK=1 with LOCAL_RANK=1 needs RANK >= 2 (torchrun numbers the ranks node by \
         node, at least one on each node before this one), but RANK=1"
    );
    let (_, msg) = err(&base(&[("GROUP_RANK", "3")], &[]));
    assert!(
        msg.starts_with("GROUP_RANK=3 with LOCAL_RANK unset (0) needs RANK >= 3"),
        "{msg}"
    );
    assert_eq!(
        err(&base(&[("GROUP_RANK", "x")], &[])).1,
        "GROUP_RANK=\"x\" is not a non-negative integer"
    );
}

#[test]
fn numbering_errors() {
    let cases: [ErrorCase; 12] = [
        (
            &[("RANK", "abc")],
            &[],
            "RANK",
            "RANK=\"abc\" is not a non-negative integer",
        ),
        (
            &[("RANK", "-1")],
            &[],
            "RANK",
            "RANK=\"-1\" is not a non-negative integer",
        ),
        (
            &[("RANK", "4")],
            &[],
            "RANK",
            "RANK=4 must be below WORLD_SIZE=4",
        ),
        (
            &[("WORLD_SIZE", "four")],
            &[],
            "WORLD_SIZE",
            "WORLD_SIZE=\"four\" is not a positive integer (the number of processes)",
        ),
        (
            &[("WORLD_SIZE", "0")],
            &[],
            "WORLD_SIZE",
            "WORLD_SIZE=\"0\" is not a positive integer (the number of processes)",
        ),
        (
            &[("LOCAL_RANK", "x1")],
            &[],
            "LOCAL_RANK",
            "LOCAL_RANK=\"x1\" is not a non-negative integer",
        ),
        (
            &[("LOCAL_RANK", "4")],
            &[],
            "LOCAL_RANK",
            "LOCAL_RANK=4 must be below WORLD_SIZE=4",
        ),
        (
            &[("LOCAL_WORLD_SIZE", "2"), ("LOCAL_RANK", "2")],
            &[],
            "LOCAL_RANK",
            "LOCAL_RANK=2 must be below LOCAL_WORLD_SIZE=2",
        ),
        (
            &[("LOCAL_WORLD_SIZE", "5")],
            &[],
            "LOCAL_WORLD_SIZE",
            "LOCAL_WORLD_SIZE=5 must not exceed WORLD_SIZE=4",
        ),
        (
            &[("LOCAL_WORLD_SIZE", "0")],
            &[],
            "LOCAL_WORLD_SIZE",
            "LOCAL_WORLD_SIZE=\"0\" is not a positive integer",
        ),
        (
            &[("WORLD_SIZE", "2147483648")],
            &[],
            "WORLD_SIZE",
            "WORLD_SIZE=\"2147483648\" is above 2147483647, the most processes NCCL accepts",
        ),
        (
            &[("RANK", "18446744073709551616")],
            &[],
            "RANK",
            "RANK=\"18446744073709551616\" is above 2147483647, the most processes NCCL accepts",
        ),
    ];
    for (overrides, remove, var, msg) in cases {
        assert_eq!(
            err(&base(overrides, remove)),
            (var.to_owned(), msg.to_owned())
        );
    }
    let (var, msg) = err(&base(&[], &["RANK"]));
    assert_eq!(var, "RANK");
    assert_eq!(
        msg,
        "RANK is not set (nor OMPI_COMM_WORLD_RANK, PMI_RANK, PMI_ID, SLURM_PROCID in a Slurm \
         job step); launch with torchrun, srun or mpirun, or set RANK to this process's rank \
         (0 <= RANK < WORLD_SIZE)"
    );
    let (var, msg) = err(&base(&[], &["WORLD_SIZE"]));
    assert_eq!(var, "WORLD_SIZE");
    assert!(msg.starts_with("WORLD_SIZE is not set (nor OMPI_COMM_WORLD_SIZE, PMI_SIZE, SLURM_NTASKS in a Slurm job step)"), "{msg}");
    assert!(cfg(&base(&[("WORLD_SIZE", "2147483647")], &[])).is_ok());
}

#[test]
fn store_errors() {
    let cases: [ErrorCase; 6] = [
        (
            &[("NCCL_RS_STORE", "redis")],
            &[],
            "NCCL_RS_STORE",
            "NCCL_RS_STORE=\"redis\" is not a store kind; expected \"tcp\" (the default) or \"file:<directory>\" with an absolute directory every rank can see",
        ),
        (
            &[("MASTER_ADDR", " ")],
            &[],
            "MASTER_ADDR",
            "MASTER_ADDR=\" \" is not a host name or IP address (of rank 0's host)",
        ),
        (
            &[("MASTER_PORT", "65536")],
            &[],
            "MASTER_PORT",
            "MASTER_PORT=\"65536\" is not a TCP port number (1-65535)",
        ),
        (
            &[("NCCL_RS_STORE_TIMEOUT_SECS", "1.5")],
            &[],
            "NCCL_RS_STORE_TIMEOUT_SECS",
            "NCCL_RS_STORE_TIMEOUT_SECS=\"1.5\" is not a positive whole number of seconds (default 300)",
        ),
        (
            &[("NCCL_RS_STORE_SECRET", "")],
            &[],
            "NCCL_RS_STORE_SECRET",
            "NCCL_RS_STORE_SECRET is set but empty; unset it to run without authentication, or set the same non-empty secret on every rank",
        ),
        (
            &[],
            &["MASTER_PORT"],
            "MASTER_PORT",
            "MASTER_PORT is not set; with the TCP store set it to a free TCP port on rank 0's host (1-65535, e.g. 29500; torchrun sets it)",
        ),
    ];
    for (overrides, remove, var, msg) in cases {
        assert_eq!(
            err(&base(overrides, remove)),
            (var.to_owned(), msg.to_owned())
        );
    }
    for bad in ["file:", "file", ""] {
        assert_eq!(
            err(&base(&[("NCCL_RS_STORE", bad)], &[])).0,
            "NCCL_RS_STORE"
        );
    }
    let c = cfg(&base(
        &[("NCCL_RS_STORE", "TCP"), ("MASTER_ADDR", "[::1]")],
        &[],
    ))
    .unwrap();
    assert_eq!(
        c.store,
        StoreSpec::Tcp {
            addr: "::1".into(),
            port: 29500
        }
    );
}

#[test]
fn the_store_setting_is_trimmed_and_a_file_store_needs_an_absolute_directory() {
    for spelled in [
        "file:/shared/rdzv",
        " file:/shared/rdzv ",
        "file: /shared/rdzv\n",
    ] {
        let c = cfg(&base(
            &[("NCCL_RS_STORE", spelled), ("NCCL_RS_NAMESPACE", "run-1")],
            &[],
        ))
        .unwrap_or_else(|e| panic!("{spelled:?}: {e}"));
        assert_eq!(
            c.store,
            StoreSpec::File {
                dir: "/shared/rdzv".into()
            },
            "{spelled:?}"
        );
    }
    for spelled in ["tcp\n", " TCP ", "\ttcp"] {
        let c = cfg(&base(&[("NCCL_RS_STORE", spelled)], &[]));
        assert!(
            matches!(
                c,
                Ok(RendezvousConfig {
                    store: StoreSpec::Tcp { .. },
                    ..
                })
            ),
            "{spelled:?}: {c:?}"
        );
    }
    for relative in ["file:shared/dir", "file:./rdzv", "file:~/rdzv"] {
        let (var, msg) = err(&base(
            &[("NCCL_RS_STORE", relative), ("NCCL_RS_NAMESPACE", "run-1")],
            &[],
        ));
        assert_eq!(var, "NCCL_RS_STORE");
        assert!(
            msg.starts_with(&format!(
                "NCCL_RS_STORE={relative:?} names the relative directory"
            )),
            "{msg}"
        );
        assert!(msg.contains("give an absolute path"), "{msg}");
    }
}

#[test]
fn a_file_store_without_a_job_id_needs_a_namespace() {
    let file = ("NCCL_RS_STORE", "file:/shared/rdzv");
    let by_hand = base(&[file], &[]);
    let pmi = [("PMI_RANK", "1"), ("PMI_SIZE", "4"), file];
    let ompi = [
        ("OMPI_COMM_WORLD_RANK", "1"),
        ("OMPI_COMM_WORLD_SIZE", "4"),
        file,
    ];
    for (launch, launcher) in [
        (&by_hand[..], Launcher::Manual),
        (&pmi[..], Launcher::Pmi),
        (&ompi[..], Launcher::OpenMpi),
    ] {
        let (var, msg) = err(launch);
        assert_eq!(var, "NCCL_RS_NAMESPACE", "{launcher:?}");
        assert!(
            msg.starts_with(
                "NCCL_RS_STORE=file:/shared/rdzv needs NCCL_RS_NAMESPACE: no job id of a \
                 launcher names this run"
            ),
            "{msg}"
        );
        assert!(
            msg.contains("set NCCL_RS_NAMESPACE to a name of this run"),
            "{msg}"
        );
        let named = with(launch, &[("NCCL_RS_NAMESPACE", "run-1")], &[]);
        let c = cfg(&named).unwrap();
        assert_eq!((c.launcher, c.namespace.as_str()), (launcher, "run-1"));
    }
    // A launcher's job id names the run; the TCP store lives with it.
    let ompi_job = with(&ompi, &[("OMPI_MCA_ess_base_jobid", "3812")], &[]);
    assert_eq!(cfg(&ompi_job).unwrap().namespace, "ompi.3812");
    assert_eq!(cfg(&BASE).unwrap().namespace, "manual");
}

#[test]
fn namespace_variable() {
    let c = cfg(&base(&[("NCCL_RS_NAMESPACE", "exp-3.try_2")], &[])).unwrap();
    assert_eq!(c.namespace, "exp-3.try_2");
    for bad in ["", "a/b", "with space", &"x".repeat(49)] {
        let vars = base(&[], &[]);
        let map: HashMap<&str, String> = vars
            .iter()
            .map(|(k, v)| (*k, (*v).to_owned()))
            .chain([("NCCL_RS_NAMESPACE", bad.to_owned())])
            .collect();
        let e = RendezvousConfig::from_vars(|n| map.get(n).cloned()).unwrap_err();
        assert!(
            e.to_string()
                .starts_with(&format!("NCCL_RS_NAMESPACE={bad:?} is not a key namespace")),
            "{e}"
        );
    }
}

/// The cells of the documentation table's row for `name`.
fn table_row(table: &str, name: &str) -> Vec<String> {
    let prefix = format!("| {name} |");
    let row = table
        .lines()
        .find(|line| line.starts_with(&prefix))
        .unwrap_or_else(|| panic!("no row for {name:?} in the table"));
    row.split('|').map(|cell| cell.trim().to_owned()).collect()
}

#[test]
fn the_documented_table_is_the_source_table() {
    let table = include_str!("../../launch_variables.md");
    for quantity in QUANTITIES {
        let cell = &table_row(table, quantity.name)[2];
        let named: Vec<&str> = cell.split('`').skip(1).step_by(2).collect();
        let sources: Vec<&str> = quantity.sources.iter().map(|s| s.var).collect();
        assert_eq!(named, sources, "the {:?} row", quantity.name);
    }
}
