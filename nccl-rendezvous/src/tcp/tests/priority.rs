//! The gate's scheduling: `GatePriority::Idle` puts the gate thread under
//! `SCHED_IDLE`, read back from `/proc` (Linux only).

use super::*;

/// `SCHED_IDLE`'s number in `/proc/<pid>/task/<tid>/stat`.
const SCHED_IDLE: u32 = 5;

/// The scheduling policies of this process's gate threads (named
/// `nccl-store-gate-<port>`, which the kernel cuts to `nccl-store-gate`).
fn gate_policies() -> Vec<u32> {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return Vec::new();
    };
    tasks
        .flatten()
        .filter_map(|task| std::fs::read_to_string(task.path().join("stat")).ok())
        .filter(|stat| stat.contains("(nccl-store-gate"))
        .filter_map(|stat| {
            // Field 41 (policy), counted after the name's closing
            // parenthesis, which ends field 2.
            let after = stat.rsplit_once(')')?.1;
            after.split_whitespace().nth(41 - 3)?.parse().ok()
        })
        .collect()
}

#[test]
fn an_idle_gate_runs_under_sched_idle() {
    // The other tests' servers keep the default (nice +10): a gate under
    // SCHED_IDLE is this one.
    let options = TcpStoreServerOptions::default().with_gate_priority(GatePriority::Idle);
    let server = server_with(options);
    eventually("the gate thread under SCHED_IDLE", || {
        gate_policies().contains(&SCHED_IDLE)
    });
    // It still lets clients in.
    let store = TcpStore::connect_to(server.connect_addr(), TcpStoreOptions::default()).unwrap();
    store.set("k", b"v").unwrap();
    assert_eq!(store.try_get("k").unwrap().as_deref(), Some(&b"v"[..]));
}
