//! An untold heal after a rank's process exits, over a TCP store: the
//! store deletes the exited rank's presence key when its connection
//! closes, and the survivors' failure exchange names it as a suspect
//! without waiting out its bound (the exchange's own test, with an hour's
//! bound, shows it ends early). Threads play the ranks, each with its own
//! client, as processes would.

use std::sync::Arc;
use std::thread;

use nccl_group::{
    GroupOptions, HealOptions, ProcessGroup, Recovery, Store, TcpStore, TcpStoreOptions,
    TcpStoreServer,
};
use nccl_test_support::group::cache::{DEADLINE, LONG};
use nccl_test_support::within;

const WORLD: usize = 3;

#[test]
fn an_untold_heal_names_the_rank_whose_process_exited() {
    let server = TcpStoreServer::bind("127.0.0.1:0", Default::default()).expect("server");
    let client = || -> Arc<dyn Store> {
        let options = TcpStoreOptions::default().with_timeout(LONG);
        Arc::new(TcpStore::connect_to(server.local_addr(), options).expect("client"))
    };
    let options = GroupOptions::default()
        .without_dump_dir()
        .with_timeout(LONG);
    let mut groups: Vec<ProcessGroup> = (0..WORLD)
        .map(|rank| {
            ProcessGroup::builder("exits")
                .rank(rank)
                .world_size(WORLD)
                .store(client())
                .options(options.clone())
                .build()
                .expect("joined")
        })
        .collect();
    let watcher = client();
    let alive = "exits/0/presence/alive/2";
    assert!(watcher.try_get(alive).expect("read").is_some());
    // Rank 2's process exits: its group and its store client go, and the
    // kernel closes its connection.
    drop(groups.pop());
    nccl_test_support::eventually("rank 2's presence key deleted", LONG, || {
        watcher.try_get(alive).expect("read").is_none()
    });
    let healed = within("an untold heal without rank 2", DEADLINE, move || {
        thread::scope(|scope| {
            let heals: Vec<_> = groups
                .iter()
                .map(|group| scope.spawn(move || group.heal(&HealOptions::new())))
                .collect();
            heals
                .into_iter()
                .map(|h| h.join().expect("no panic").expect("healed"))
                .collect::<Vec<_>>()
        })
    });
    for (rank, healed) in healed.iter().enumerate() {
        assert_eq!(healed.lost(), [2], "rank {rank}");
        let group = healed.group();
        assert_eq!((group.rank(), group.world_size()), (rank, 2));
        // The replaced generation's presence is withdrawn: the process
        // goes on in the healed one.
        let joined = format!("exits/0/presence/joined/{rank}");
        assert_eq!(watcher.try_get(&joined).expect("read"), None);
    }
}
