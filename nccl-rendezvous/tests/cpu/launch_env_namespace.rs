//! The key namespace: two attempts of one job sharing a store (torchrun's
//! agent store lives across restarts; a file-store directory outlives a
//! crashed job) never see each other's keys, while every rank of one
//! attempt meets the others under the same namespace.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use nccl_rendezvous::{InProcessStore, PrefixStore, RendezvousConfig, Store};

/// Worker `rank` of 2 of torchrun run `run`, attempt `restart`, meeting
/// at the file store in `dir`.
fn torchrun_worker(run: &str, restart: u32, rank: usize, dir: &str) -> RendezvousConfig {
    let vars = HashMap::from([
        ("TORCHELASTIC_RUN_ID", run.to_owned()),
        ("TORCHELASTIC_RESTART_COUNT", restart.to_string()),
        ("RANK", rank.to_string()),
        ("WORLD_SIZE", "2".to_owned()),
        ("LOCAL_RANK", rank.to_string()),
        ("LOCAL_WORLD_SIZE", "2".to_owned()),
        ("GROUP_RANK", "0".to_owned()),
        ("MASTER_ADDR", "127.0.0.1".to_owned()),
        ("MASTER_PORT", "29500".to_owned()),
        ("NCCL_RS_STORE", format!("file:{dir}")),
        ("NCCL_RS_STORE_TIMEOUT_SECS", "5".to_owned()),
    ]);
    RendezvousConfig::from_vars(|n| vars.get(n).cloned()).unwrap()
}

/// Task `task` of 2 of Slurm job 77, restarted `restart` times.
fn slurm_task(restart: u32, task: usize) -> RendezvousConfig {
    let vars = HashMap::from([
        ("SLURM_JOB_ID", "77".to_owned()),
        ("SLURM_STEP_ID", "0".to_owned()),
        ("SLURM_RESTART_COUNT", restart.to_string()),
        ("SLURM_PROCID", task.to_string()),
        ("SLURM_NTASKS", "2".to_owned()),
        ("SLURM_STEP_NODELIST", "n[1-2]".to_owned()),
    ]);
    RendezvousConfig::from_vars(|n| vars.get(n).cloned()).unwrap()
}

#[test]
fn restarts_of_one_run_see_disjoint_keys_in_a_file_store() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path().display().to_string();
    let first = torchrun_worker("job-9", 0, 0, &dir).connect().unwrap();
    let peer = torchrun_worker("job-9", 0, 1, &dir).connect().unwrap();
    let second = torchrun_worker("job-9", 1, 0, &dir).connect().unwrap();

    // The crashed attempt left its unique id and a half-counted barrier.
    first.set("unique-id", b"attempt-0").unwrap();
    assert_eq!(first.add("arrived", 1).unwrap(), 1);
    // Its peer meets it there...
    assert_eq!(
        peer.get("unique-id", Duration::from_secs(2)).unwrap(),
        b"attempt-0"
    );
    // ...the next attempt does not.
    assert_eq!(second.try_get("unique-id").unwrap(), None);
    assert!(
        second
            .get("unique-id", Duration::from_millis(50))
            .unwrap_err()
            .is_timeout()
    );
    assert_eq!(second.add("arrived", 1).unwrap(), 1);
    second.set("unique-id", b"attempt-1").unwrap();
    assert_eq!(first.get_default("unique-id").unwrap(), b"attempt-0");
    assert!(!second.delete("never-set").unwrap());
}

#[test]
fn restarts_of_one_job_see_disjoint_keys_in_one_store() {
    let shared = Arc::new(InProcessStore::new());
    // What `connect` does with any store: scope it to the namespace.
    let scoped = |c: &RendezvousConfig| PrefixStore::new(Arc::clone(&shared), c.namespace.clone());
    let (a0, a1, b0) = (slurm_task(0, 0), slurm_task(0, 1), slurm_task(1, 0));
    assert_eq!(a0.namespace, a1.namespace);
    assert_ne!(a0.namespace, b0.namespace);
    let (a0, a1, b0) = (
        scoped(&a0).unwrap(),
        scoped(&a1).unwrap(),
        scoped(&b0).unwrap(),
    );
    a0.set("k", b"first run").unwrap();
    assert_eq!(a1.try_get("k").unwrap().as_deref(), Some(&b"first run"[..]));
    assert_eq!(b0.try_get("k").unwrap(), None);
    b0.set("k", b"requeued").unwrap();
    assert_eq!(a1.try_get("k").unwrap().as_deref(), Some(&b"first run"[..]));
    // Different runs and jobs have different namespaces too.
    let dir = "/tmp/unused";
    assert_ne!(
        torchrun_worker("job-9", 0, 0, dir).namespace,
        torchrun_worker("job-10", 0, 0, dir).namespace
    );
}
