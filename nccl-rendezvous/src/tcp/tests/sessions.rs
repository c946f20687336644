//! Session keys: deleted when the connection that set them closes, taken
//! over by the same client after a reconnect, refused to another client,
//! and answered "unsupported" by stores that see no connections.

use super::*;
use crate::{ErrorKind, FileStore, InProcessStore, PrefixStore};

#[test]
fn a_session_key_vanishes_when_its_client_goes_and_not_before() {
    let server = server();
    let (watcher, rank) = (client(&server), client(&server));
    rank.set_session("alive/1", b"pid 42").unwrap();
    assert_eq!(watcher.try_get("alive/1").unwrap().unwrap(), b"pid 42");
    // The rank's other requests use other connections: the key stays.
    rank.set("progress/1", b"57").unwrap();
    assert_eq!(rank.get("progress/1", PATIENCE).unwrap(), b"57");
    assert!(watcher.try_get("alive/1").unwrap().is_some());
    // Its process exits (the kernel closes its sockets; dropping the
    // client closes them the same way).
    drop(rank);
    eventually("the session key deleted", || {
        watcher.try_get("alive/1").unwrap().is_none()
    });
    // A plain key of the same client outlives it.
    assert_eq!(watcher.try_get("progress/1").unwrap().unwrap(), b"57");
}

#[test]
fn a_deleted_session_key_is_an_ordinary_key_again() {
    let server = server();
    let (watcher, rank) = (client(&server), client(&server));
    rank.set_session("alive/0", b"1").unwrap();
    assert!(rank.delete("alive/0").unwrap());
    watcher.set("alive/0", b"someone else's").unwrap();
    let others = server.stats().connections - 2; // the rank's two
    drop(rank);
    // The closing connection no longer holds it: nothing deletes it.
    eventually("the rank's connections closed", || {
        server.stats().connections == others
    });
    assert_eq!(
        watcher.try_get("alive/0").unwrap().unwrap(),
        b"someone else's"
    );
    // And another client may bind it now.
    watcher.set_session("alive/0", b"mine").unwrap();
}

#[test]
fn after_a_server_restart_the_next_request_registers_the_keys_again() {
    let server = server();
    let rank = client(&server);
    // The last value of a key is the one registered again.
    for (key, value) in [("alive/2", "a"), ("alive/3", "b"), ("alive/3", "b2")] {
        rank.set_session(key, value.as_bytes()).unwrap();
    }
    let restarted = restart(server);
    // Any request finds the session connection closed and reopens it.
    assert!(rank.try_get("unrelated").unwrap().is_none());
    let watcher = client(&restarted);
    assert_eq!(watcher.try_get("alive/2").unwrap().unwrap(), b"a");
    assert_eq!(watcher.try_get("alive/3").unwrap().unwrap(), b"b2");
    drop(rank);
    eventually("both keys deleted", || {
        watcher.try_get("alive/2").unwrap().is_none()
            && watcher.try_get("alive/3").unwrap().is_none()
    });
}

#[test]
fn a_key_another_client_took_meanwhile_does_not_keep_the_others_from_coming_back() {
    let server = server();
    let rank = client(&server);
    rank.set_session("alive/a", b"rank's").unwrap();
    rank.set_session("alive/b", b"rank's").unwrap();
    let restarted = restart(server);
    // Another client binds the first key before the rank's next request.
    let other = client(&restarted);
    other.set_session("alive/a", b"other's").unwrap();
    assert!(rank.try_get("unrelated").unwrap().is_none());
    assert_eq!(other.try_get("alive/a").unwrap().unwrap(), b"other's");
    assert_eq!(other.try_get("alive/b").unwrap().unwrap(), b"rank's");
    // The rank holds only the second key now: its going deletes that one.
    drop(rank);
    eventually("the rank's key deleted", || {
        other.try_get("alive/b").unwrap().is_none()
    });
    assert_eq!(other.try_get("alive/a").unwrap().unwrap(), b"other's");
}

#[test]
fn bad_session_keys_are_refused_with_what_was_expected() {
    let server = server();
    let (first, second) = (client(&server), client(&server));
    let empty = first.set_session("", b"v").unwrap_err();
    assert_eq!(empty.kind(), ErrorKind::InvalidArgument, "{empty}");
    assert!(empty.to_string().contains("non-empty"), "{empty}");
    first.set_session("alive/0", b"first").unwrap();
    let taken = second.set_session("alive/0", b"second").unwrap_err();
    assert_eq!(taken.kind(), ErrorKind::InvalidArgument, "{taken}");
    assert!(taken.to_string().contains("no other client"), "{taken}");
    assert_eq!(second.try_get("alive/0").unwrap().unwrap(), b"first");
    // Both clients still serve.
    second.set_session("alive/1", b"second").unwrap();
    first.set_session("alive/0", b"again").unwrap();
}

#[test]
fn a_prefix_store_scopes_session_keys() {
    let server = server();
    let watcher = client(&server);
    let rank = PrefixStore::new(client(&server), "job").unwrap();
    rank.set_session("alive/0", b"").unwrap();
    assert!(watcher.try_get("job/alive/0").unwrap().is_some());
    drop(rank);
    eventually("the scoped key deleted", || {
        watcher.try_get("job/alive/0").unwrap().is_none()
    });
}

#[test]
fn stores_without_sessions_say_so() {
    let dir = tempfile::tempdir().unwrap();
    let file = FileStore::open_default(dir.path()).unwrap();
    let memory = InProcessStore::new();
    let scoped = PrefixStore::new(InProcessStore::new(), "job").unwrap();
    let stores: [&dyn Store; 3] = [&file, &memory, &scoped];
    for store in stores {
        let error = store.set_session("alive/0", b"").unwrap_err();
        assert_eq!(error.kind(), ErrorKind::Unsupported, "{error}");
        assert!(
            error.to_string().contains("does not support session keys"),
            "{error}"
        );
        assert!(store.try_get("alive/0").unwrap().is_none());
    }
}
