//! The grow scenario: the survivors of a heal grow back to world 4 with a
//! process rank 0 starts, and the new process's own part.

use nccl_group::Lifecycle;
use nccl_group::Recovery;
use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

use nccl_core::{Capabilities, Capability, Device};
use nccl_group::{ErrorKind, GrowOptions, GrowPath, Grown, ProcessGroup, RendezvousConfig};
use nccl_test_support::processes::{spawn_child_test, wait_children};

use super::rank::{Member, OP_TIMEOUT, PATIENCE, ROUNDS, finish, group_options};
use super::{CHILD, SCENARIO_VAR, Scenario};

/// Rounds at world 3, between the heal and the grow: the healed group's
/// communicator then exists (shrunk or made afresh) for the grow to grow.
const HEALED_ROUNDS: usize = 20;
/// The new process's id among the members (generation 0 had 0 to 3).
const JOINER_ID: usize = 4;
/// The survivors' ids, as rank 0 tells the new process.
const OLDS_VAR: &str = "HEAL_GROW_OLDS";
/// How long the new process waits for the grow's offer.
const JOIN_WAIT: Duration = Duration::from_secs(120);

/// World 4: rank 3 exits, the others heal to 3, then grow back to 4 with
/// a process rank 0 starts.
pub(super) fn grow_back(me: Member, dir: &Path) {
    let old = me.old();
    if old == 3 {
        println!("heal victim: exiting between operations");
        let _ = std::io::stdout().flush();
        std::process::exit(0);
    }
    let error = me.until_failure();
    println!("heal phase 0 failed: {error}");
    let me = me.heal(true, false, "4 -> 3");
    let joiner = (old == 0).then(|| start_joiner(&me.olds));
    me.rounds(0..HEALED_ROUNDS, "world 3");
    let me = grow(me);
    me.rounds(0..ROUNDS, "world 4 after the grow");
    me.group.destroy().expect("destroy the grown group");
    println!("heal report: ok after a heal and a grow");
    if let Some(joiner) = joiner {
        let ended = wait_children(vec![joiner], PATIENCE, PATIENCE).remove(0);
        for line in ended.stdout.lines().filter(|l| l.starts_with("heal ")) {
            println!("heal grow: the new process said: {line}");
        }
        assert!(
            ended.succeeded(),
            "the new process ended {:?}\n----- its stdout -----\n{}\n----- its stderr -----\n{}",
            ended.status,
            ended.stdout,
            ended.stderr
        );
        println!("heal grow: the new process ended: ok");
    }
    finish(dir, old, &["done.1", "done.2"]);
}

/// Starts the new process: this test binary as a rank of no launch, on
/// this GPU as a simulated host of its own, reaching rank 0's store with
/// the launch's variables (its own numbering, which the grow's offer
/// replaces).
fn start_joiner(olds: &[usize]) -> nccl_test_support::processes::ChildTest {
    let olds: Vec<String> = olds.iter().map(usize::to_string).collect();
    spawn_child_test(CHILD, |command| {
        command
            .env(SCENARIO_VAR, Scenario::GrowJoiner.name())
            .env(OLDS_VAR, olds.join(","))
            .env("NCCL_HOSTID", "simhost-joiner")
            .env("RANK", JOINER_ID.to_string())
            .env("GROUP_RANK", JOINER_ID.to_string())
            .env("WORLD_SIZE", (JOINER_ID + 1).to_string());
    })
}

/// The survivors grow by 1: `ncclCommGrow` where the loaded NCCL has it;
/// otherwise the refusal names 2.29.2, and the grow is done again making
/// every communicator afresh.
fn grow(me: Member) -> Member {
    let caps = Capabilities::loaded().expect("a loaded NCCL");
    let options = GrowOptions::new().with_timeout(Duration::from_secs(60));
    let started = Instant::now();
    let grown: Grown = match me.group.grow(1, &options) {
        Ok(grown) => {
            assert!(
                caps.has(Capability::Grow),
                "NCCL {} has no ncclCommGrow, but the grow took {:?}",
                caps.version(),
                grown.path()
            );
            grown
        }
        Err(error) if error.kind() == ErrorKind::Unsupported => {
            assert!(
                !caps.has(Capability::Grow),
                "NCCL {} can grow: {error}",
                caps.version()
            );
            assert!(error.to_string().contains("2.29.2"), "{error}");
            println!("heal grow: NCCL {}: refused: {error}", caps.version());
            me.group
                .grow(1, &options.clone().with_grow(false))
                .expect("grown with fresh communicators")
        }
        Err(error) => panic!("the grow: {error}"),
    };
    let took = started.elapsed();
    match grown.path() {
        GrowPath::Grown { grown: g, .. } => assert_eq!(*g, 1, "{:?}", grown.path()),
        GrowPath::Recreated { reason } => assert!(
            !caps.has(Capability::Grow) && reason.contains("with_grow(false)"),
            "NCCL {} can grow, but the grow took {:?}",
            caps.version(),
            grown.path()
        ),
        other => panic!("an unknown path {other:?}"),
    }
    let group = grown.group();
    assert_eq!(
        group.rank(),
        me.group.rank(),
        "a current rank keeps its rank"
    );
    assert_eq!(group.world_size(), 4);
    assert_eq!(grown.new_ranks(), 3..4);
    let stale = me.group.grow(2, &options).expect_err("the old generation");
    assert_eq!(stale.kind(), ErrorKind::Healed, "{stale}");
    println!(
        "heal grow 3 -> 4: NCCL {}: generation {} rank {} of {}, new ranks {:?}, {:?}, in {took:?}",
        caps.version(),
        group.generation(),
        group.rank(),
        group.world_size(),
        grown.new_ranks(),
        grown.path(),
    );
    let mut olds = me.olds;
    olds.push(JOINER_ID);
    Member {
        group: grown.into_group(),
        olds,
        stream: me.stream,
    }
}

/// The new process: joins the grow through rank 0's store, runs the
/// rounds at world 4 as member 4, and destroys the group with the others.
pub(super) fn join() {
    let config = RendezvousConfig::from_env().expect("the launch's variables");
    let started = Instant::now();
    // From the configuration, join_grown connects to rank 0's store as a
    // client, whatever the configuration's rank.
    let group = ProcessGroup::builder("heal")
        .config(&config)
        .options(group_options(OP_TIMEOUT))
        .join_grown(JOIN_WAIT)
        .expect("joined the grow");
    println!(
        "heal grow joined: generation {} rank {} of {}, in {:?}",
        group.generation(),
        group.rank(),
        group.world_size(),
        started.elapsed()
    );
    assert_eq!((group.rank(), group.world_size()), (3, 4));
    let mut olds: Vec<usize> = std::env::var(OLDS_VAR)
        .expect("rank 0 names the survivors")
        .split(',')
        .map(|old| old.parse().expect("a survivor's id"))
        .collect();
    olds.push(JOINER_ID);
    let device = Device::new(config.local_rank).expect("the GPU");
    let me = Member {
        group,
        olds,
        stream: device.new_stream().expect("a stream"),
    };
    me.rounds(0..ROUNDS, "the new process");
    me.group.destroy().expect("destroy the grown group");
    println!("heal grow joined: ok after {ROUNDS} rounds");
}
