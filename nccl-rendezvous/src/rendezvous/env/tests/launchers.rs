//! Each launcher's variables, alone and nested in another's.

use super::{SRUN, cfg, err, with};
use crate::rendezvous::{Launcher, RendezvousConfig, StoreSpec};

#[test]
fn a_slurm_step_alone() {
    let c = cfg(&SRUN).unwrap();
    assert_eq!((c.rank, c.world_size, c.local_rank), (5, 8, 1));
    assert_eq!((c.local_world_size, c.node_rank), (Some(2), Some(2)));
    assert_eq!(c.launcher, Launcher::Slurm);
    assert_eq!(c.namespace, "slurm.4242.0.0");
    // Rank 0 is task 0 of the step, on its first node; the port comes
    // from the job id.
    assert_eq!(
        c.store,
        StoreSpec::Tcp {
            addr: "gpu07".into(),
            port: 15000 + 4242
        }
    );
    // The variables a launcher sets by hand win over the derived ones.
    let c = cfg(&with(
        &SRUN,
        &[("MASTER_ADDR", "10.0.0.9"), ("MASTER_PORT", "1234")],
        &[],
    ))
    .unwrap();
    assert_eq!(
        c.store,
        StoreSpec::Tcp {
            addr: "10.0.0.9".into(),
            port: 1234
        }
    );
}

#[test]
fn slurm_address_precedence() {
    let addr = |vars: &[(&'static str, &'static str)], remove: &[&str]| match cfg(&with(
        &SRUN, vars, remove,
    ))
    .unwrap()
    .store
    {
        StoreSpec::Tcp { addr, .. } => addr,
        other => panic!("{other:?}"),
    };
    let lists = [
        "SLURM_STEP_NODELIST",
        "SLURM_NODELIST",
        "SLURM_JOB_NODELIST",
    ];
    assert_eq!(addr(&[("SLURM_NODELIST", "a[1-2]")], &[]), "gpu07");
    assert_eq!(addr(&[("SLURM_NODELIST", "a[1-2],b3")], &lists[..1]), "a1");
    assert_eq!(
        addr(&[("SLURM_JOB_NODELIST", "rack[2-3]-n[01-02]")], &lists[..2]),
        "rack2-n01"
    );
    assert_eq!(
        addr(&[("SLURM_LAUNCH_NODE_IPADDR", "10.1.2.3")], &lists),
        "10.1.2.3"
    );
    // Every task on one node: loopback, whatever the lists say.
    assert_eq!(
        addr(
            &[
                ("SLURM_NTASKS", "2"),
                ("SLURM_STEP_TASKS_PER_NODE", "2"),
                ("SLURM_NODEID", "0"),
                ("SLURM_PROCID", "1")
            ],
            &[]
        ),
        "127.0.0.1"
    );
    let (var, msg) = err(&with(&SRUN, &[], &lists));
    assert_eq!(var, "MASTER_ADDR");
    assert!(msg.contains("first host of SLURM_STEP_NODELIST"), "{msg}");
    let (var, msg) = err(&with(&SRUN, &[("SLURM_STEP_NODELIST", "gpu[07-")], &[]));
    assert_eq!(var, "SLURM_STEP_NODELIST");
    assert_eq!(
        msg,
        "SLURM_STEP_NODELIST=\"gpu[07-\" is not a Slurm host list: expected a number, found the \
         end at position 7; expected host names and bracketed ranges such as node[01-04,7]"
    );
    let (var, msg) = err(&with(&SRUN, &[], &["SLURM_JOB_ID"]));
    assert_eq!(var, "MASTER_PORT");
    assert!(msg.contains("derived from SLURM_JOB_ID"), "{msg}");
}

#[test]
fn slurm_counts_only_in_a_job_step() {
    for step in [None, Some("-5"), Some("4294967290"), Some("4294967291")] {
        let mut vars = with(&SRUN, &[], &["SLURM_STEP_ID"]);
        if let Some(step) = step {
            vars.push(("SLURM_STEP_ID", step));
        }
        let get = |n: &str| {
            vars.iter()
                .find(|(k, _)| *k == n)
                .map(|(_, v)| v.to_string())
        };
        assert_eq!(RendezvousConfig::detect_launcher(get), None, "{step:?}");
        let (var, msg) = err(&vars);
        assert_eq!(var, "WORLD_SIZE");
        assert!(
            msg.contains("this is a batch script or an allocation's shell"),
            "{msg}"
        );
        assert!(
            RendezvousConfig::from_vars_if_launched(get)
                .unwrap()
                .is_none()
        );
    }
    // The older name of the step id counts too.
    let c = cfg(&with(&SRUN, &[("SLURM_STEPID", "3")], &["SLURM_STEP_ID"])).unwrap();
    assert_eq!(
        (c.launcher, c.namespace.as_str()),
        (Launcher::Slurm, "slurm.4242.3.0")
    );
}

#[test]
fn by_hand_under_srun_must_agree() {
    let c = cfg(&with(
        &SRUN,
        &[("RANK", "5"), ("WORLD_SIZE", "8"), ("LOCAL_RANK", "1")],
        &[],
    ))
    .unwrap();
    // Slurm's numbering under other names: Slurm's launch, rank 0's host
    // from the node list.
    assert_eq!((c.rank, c.launcher), (5, Launcher::Slurm));
    assert!(matches!(c.store, StoreSpec::Tcp { ref addr, .. } if addr == "gpu07"));
    for (name, value, slurm_name, slurm_value) in [
        ("RANK", "1", "SLURM_PROCID", "5"),
        ("WORLD_SIZE", "4", "SLURM_NTASKS", "8"),
        ("LOCAL_RANK", "0", "SLURM_LOCALID", "1"),
        ("GROUP_RANK", "1", "SLURM_NODEID", "2"),
    ] {
        let (var, msg) = err(&with(&SRUN, &[(name, value)], &[]));
        assert_eq!(var, name);
        assert_eq!(
            msg,
            format!(
                "{name}={value} and {slurm_name}={slurm_value} disagree: torchrun's and Slurm's \
                 launch variables are both set; unset one of them, or make them equal"
            )
        );
    }
    let (var, msg) = err(&with(&SRUN, &[("LOCAL_WORLD_SIZE", "4")], &[]));
    assert_eq!(var, "LOCAL_WORLD_SIZE");
    assert!(
        msg.starts_with(
            "LOCAL_WORLD_SIZE=4 and SLURM_STEP_TASKS_PER_NODE=\"2(x4)\" (2 on node 2) disagree"
        ),
        "{msg}"
    );
}

#[test]
fn torchrun_workers_renumber_any_outer_launcher() {
    // One srun task (or mpirun rank) per node, torchrun starting 4 workers
    // on each: worker 5 runs in task 1 of 2.
    let worker = [
        ("TORCHELASTIC_RUN_ID", "job-7"),
        ("TORCHELASTIC_RESTART_COUNT", "2"),
        ("RANK", "5"),
        ("WORLD_SIZE", "8"),
        ("LOCAL_RANK", "1"),
        ("LOCAL_WORLD_SIZE", "4"),
        ("GROUP_RANK", "1"),
        ("MASTER_ADDR", "node0"),
        ("MASTER_PORT", "29400"),
    ];
    let outer: [&[(&'static str, &'static str)]; 3] = [
        &[
            ("SLURM_STEP_ID", "0"),
            ("SLURM_PROCID", "1"),
            ("SLURM_NTASKS", "2"),
            ("SLURM_LOCALID", "0"),
            ("SLURM_NODEID", "1"),
        ],
        &[
            ("OMPI_COMM_WORLD_RANK", "1"),
            ("OMPI_COMM_WORLD_SIZE", "2"),
            ("OMPI_COMM_WORLD_LOCAL_RANK", "0"),
        ],
        &[
            ("PMI_RANK", "1"),
            ("PMI_SIZE", "2"),
            ("MPI_LOCALRANKID", "0"),
        ],
    ];
    for outer in outer {
        let c = cfg(&with(&worker, outer, &[])).unwrap();
        assert_eq!(
            (
                c.rank,
                c.world_size,
                c.local_rank,
                c.local_world_size,
                c.node_rank
            ),
            (5, 8, 1, Some(4), Some(1))
        );
        assert_eq!(c.launcher, Launcher::Torchrun);
        assert_eq!(c.namespace, "torchrun.job-7.2");
    }
}

#[test]
fn open_mpi_and_pmi_variables() {
    let ompi = [
        ("OMPI_COMM_WORLD_RANK", "3"),
        ("OMPI_COMM_WORLD_SIZE", "4"),
        ("OMPI_COMM_WORLD_LOCAL_RANK", "3"),
        ("OMPI_COMM_WORLD_LOCAL_SIZE", "4"),
        ("OMPI_MCA_ess_base_jobid", "3826286593"),
    ];
    let c = cfg(&ompi).unwrap();
    assert_eq!(
        (c.rank, c.world_size, c.local_rank, c.local_world_size),
        (3, 4, 3, Some(4))
    );
    assert_eq!(
        (c.launcher, c.namespace.as_str()),
        (Launcher::OpenMpi, "ompi.3826286593")
    );
    assert_eq!(
        c.store,
        StoreSpec::Tcp {
            addr: "127.0.0.1".into(),
            port: 15000 + 6593
        }
    );
    // mpirun inside an allocation: Slurm's variables are mpirun's daemon's.
    let nested = with(
        &ompi,
        &[
            ("SLURM_STEP_ID", "0"),
            ("SLURM_PROCID", "0"),
            ("SLURM_NTASKS", "1"),
        ],
        &[],
    );
    assert_eq!(cfg(&nested).unwrap().rank, 3);
    // Two hosts: rank 0's is not known here.
    let (var, msg) = err(&with(
        &ompi,
        &[
            ("OMPI_COMM_WORLD_LOCAL_SIZE", "2"),
            ("OMPI_COMM_WORLD_LOCAL_RANK", "1"),
        ],
        &[],
    ));
    assert_eq!(var, "MASTER_ADDR");
    assert!(
        msg.contains("2 of the 4 ranks run on this host") && msg.contains("mpirun -x MASTER_ADDR="),
        "{msg}"
    );
    let (var, msg) = err(&with(&ompi, &[], &["OMPI_MCA_ess_base_jobid"]));
    assert_eq!(var, "MASTER_PORT");
    assert!(msg.contains("mpirun -x MASTER_PORT=29500"), "{msg}");
    let (var, msg) = err(&with(&ompi, &[("RANK", "2")], &[]));
    assert_eq!(var, "RANK");
    assert!(
        msg.starts_with("RANK=2 and OMPI_COMM_WORLD_RANK=3 disagree: torchrun's and Open MPI's"),
        "{msg}"
    );

    let hydra = [
        ("PMI_RANK", "1"),
        ("PMI_SIZE", "2"),
        ("MPI_LOCALRANKID", "1"),
        ("MPI_LOCALNRANKS", "2"),
        ("MASTER_PORT", "29500"),
    ];
    let c = cfg(&hydra).unwrap();
    assert_eq!(
        (c.rank, c.local_rank, c.launcher, c.namespace.as_str()),
        (1, 1, Launcher::Pmi, "pmi")
    );
    assert!(matches!(c.store, StoreSpec::Tcp { ref addr, .. } if addr == "127.0.0.1"));
    let (var, msg) = err(&with(&hydra, &[], &["MASTER_PORT"]));
    assert_eq!(var, "MASTER_PORT");
    assert!(msg.contains("mpiexec -genv MASTER_PORT 29500"), "{msg}");
    // Cray's names and old MPICH's PMI_ID.
    let c = cfg(&[
        ("PMI_ID", "2"),
        ("PMI_SIZE", "4"),
        ("PMI_LOCAL_RANK", "0"),
        ("PMI_LOCAL_SIZE", "2"),
        ("MASTER_ADDR", "x"),
        ("MASTER_PORT", "9"),
    ])
    .unwrap();
    assert_eq!((c.rank, c.local_rank, c.local_world_size), (2, 0, Some(2)));
}

#[test]
fn pmi_beside_slurm() {
    // srun --mpi=pmi2 sets PMI_RANK and PMI_SIZE equal to Slurm's: Slurm's
    // launch, with Slurm's local rank and node list.
    let pmi2 = with(&SRUN, &[("PMI_RANK", "5"), ("PMI_SIZE", "8")], &[]);
    let c = cfg(&pmi2).unwrap();
    assert_eq!((c.launcher, c.local_rank), (Launcher::Slurm, 1));
    assert!(matches!(c.store, StoreSpec::Tcp { ref addr, .. } if addr == "gpu07"));
    // mpiexec inside an allocation: hydra's proxy is the Slurm task.
    let hydra = with(
        &SRUN,
        &[
            ("PMI_RANK", "11"),
            ("PMI_SIZE", "16"),
            ("MPI_LOCALRANKID", "3"),
            ("MPI_LOCALNRANKS", "4"),
            ("MASTER_ADDR", "gpu07"),
            ("MASTER_PORT", "29500"),
        ],
        &[],
    );
    let c = cfg(&hydra).unwrap();
    assert_eq!(
        (c.launcher, c.rank, c.world_size, c.local_rank, c.node_rank),
        (Launcher::Pmi, 11, 16, 3, None)
    );
}

#[test]
fn detecting_a_launch() {
    let detect = |vars: &[(&str, &str)]| {
        RendezvousConfig::detect_launcher(|n| {
            vars.iter()
                .find(|(k, _)| *k == n)
                .map(|(_, v)| v.to_string())
        })
    };
    assert_eq!(detect(&[]), None);
    assert_eq!(
        detect(&[("LOCAL_RANK", "0"), ("MPI_LOCALRANKID", "0")]),
        None
    );
    assert_eq!(detect(&[("WORLD_SIZE", "2")]), Some(Launcher::Manual));
    assert_eq!(
        detect(&[("RANK", "0"), ("TORCHELASTIC_RUN_ID", "none")]),
        Some(Launcher::Torchrun)
    );
    assert_eq!(detect(&SRUN), Some(Launcher::Slurm));
    assert_eq!(
        detect(&[("OMPI_COMM_WORLD_SIZE", "2")]),
        Some(Launcher::OpenMpi)
    );
    assert_eq!(detect(&[("PMI_SIZE", "2")]), Some(Launcher::Pmi));
    let launched = RendezvousConfig::from_vars_if_launched(|n| {
        SRUN.iter()
            .find(|(k, _)| *k == n)
            .map(|(_, v)| v.to_string())
    });
    assert_eq!(launched.unwrap().map(|c| c.rank), Some(5));
}
