//! Presence over a real TCP store: a rank whose connection closes is gone
//! and ends the others' exchange of reports without its own; a rank that
//! leaves cleanly, or has not announced itself, is not gone; a store
//! without session keys knows no one gone.

use std::thread;
use std::time::Duration;

use super::*;
use crate::diagnostics::recorder::records::PeerProgress;
use crate::health::peers::{self, PeerReport};
use nccl_rendezvous::{InProcessStore, TcpStore, TcpStoreOptions, TcpStoreServer};
use nccl_test_support::within;

const WORLD: usize = 3;

/// How long a step that must end may take: a hang guard, and the store's
/// timeout.
const PATIENCE: Duration = Duration::from_secs(60);

/// Rank `rank` of group "presence" on `store`, announced.
fn announced(store: Arc<dyn Store>, rank: usize) -> Membership {
    let m = Membership::join("presence", rank, WORLD, store, "a test store".into(), PATIENCE)
        .unwrap();
    Presence::of(&m).unwrap().announce(rank).unwrap();
    m
}

fn client(server: &TcpStoreServer) -> Arc<dyn Store> {
    let options = TcpStoreOptions::default().with_timeout(PATIENCE);
    Arc::new(TcpStore::connect_to(server.local_addr(), options).unwrap())
}

fn report(rank: usize) -> PeerReport {
    let progress = PeerProgress {
        rank,
        last_enqueued: None,
        last_completed: None,
    };
    PeerReport::new(progress, &[])
}

#[test]
fn a_rank_whose_connection_closes_is_gone_and_the_exchange_ends_without_it() {
    let server = TcpStoreServer::bind("127.0.0.1:0", Default::default()).unwrap();
    let mut members: Vec<Membership> = (0..WORLD).map(|r| announced(client(&server), r)).collect();
    assert!(!Presence::of(&members[0]).unwrap().gone(2));
    // Rank 2's process dies: the kernel closes its store connection.
    drop(members.pop());
    let answered = within("the exchange without rank 2", PATIENCE, move || {
        thread::scope(|scope| {
            let exchanges: Vec<_> = members
                .iter()
                .map(|m| scope.spawn(move || exchange_of(m)))
                .collect();
            exchanges
                .into_iter()
                .map(|exchange| exchange.join().expect("an exchange thread"))
                .collect::<Vec<_>>()
        })
    });
    assert_eq!(
        answered,
        [vec![0, 1], vec![0, 1]],
        "the exchange waited for the dead rank"
    );
}

/// The ranks whose reports `m`'s exchange gathered, waiting an hour: it
/// ends early only when the missing rank is gone.
fn exchange_of(m: &Membership) -> Vec<usize> {
    let presence = Presence::of(m).unwrap();
    let scope = m.protocol(crate::protocols::PROGRESS).unwrap();
    let mine = report(m.rank);
    peers::publish(&*m.store, &scope, &mine);
    let hour = Duration::from_secs(3600);
    let gone = |rank| presence.gone(rank);
    let reports = peers::gather(&*m.store, &scope, mine, WORLD, hour, &gone);
    reports.iter().map(|r| r.progress.rank).collect()
}

#[test]
fn a_rank_that_leaves_or_has_not_come_is_not_gone() {
    let server = TcpStoreServer::bind("127.0.0.1:0", Default::default()).unwrap();
    let watcher = announced(client(&server), 0);
    let before = server.stats().connections;
    let leaving = announced(client(&server), 1);
    Presence::of(&leaving).unwrap().withdraw(1);
    drop(leaving);
    nccl_test_support::eventually("rank 1's connections closed", PATIENCE, || {
        server.stats().connections == before
    });
    let presence = Presence::of(&watcher).unwrap();
    // Rank 1's keys were deleted in the order that never shows it gone.
    assert!(!presence.gone(1));
    assert!(!presence.gone(2), "rank 2 never announced itself");
}

#[test]
fn a_store_without_session_keys_knows_no_one_gone() {
    let store: Arc<dyn Store> = Arc::new(InProcessStore::new());
    let members: Vec<Membership> = (0..WORLD).map(|r| announced(Arc::clone(&store), r)).collect();
    let presence = Presence::of(&members[0]).unwrap();
    assert!((0..WORLD).all(|rank| !presence.gone(rank)));
}
