//! Session keys: keys the server deletes when the connection that set
//! them (`SET_SESSION`) closes, however it closes (a clean exit, a crash,
//! a SIGKILL: the kernel closes a dead process's sockets), so that other
//! clients learn a process is gone by finding its key absent.
//!
//! A key is bound to a connection and to its client's owner name (random,
//! one per client): the same client may take the key over on another
//! connection (after a reconnect, before the server has seen the old one
//! close), another client may not while the binding lasts. A `DELETE`
//! ends the binding; a plain write changes the value, not the binding.

use std::collections::HashMap;

use super::super::wire::Owner;
use super::table::Id;

/// Which connection and client hold each session key.
#[derive(Debug, Default)]
pub(super) struct SessionKeys {
    holders: HashMap<String, (Id, Owner)>,
    by_connection: HashMap<Id, Vec<String>>,
}

impl SessionKeys {
    /// Whether `owner` may bind `key`: it is free, or already `owner`'s.
    pub(super) fn may_bind(&self, key: &str, owner: &Owner) -> bool {
        self.holders.get(key).is_none_or(|(_, held)| held == owner)
    }

    /// Binds `key` to connection `id` of `owner` (checked with
    /// [`SessionKeys::may_bind`]), moving it from another connection of
    /// the same owner.
    pub(super) fn bind(&mut self, key: &str, id: Id, owner: Owner) {
        if let Some((old, _)) = self.holders.insert(key.to_owned(), (id, owner)) {
            self.unlist(old, key);
        }
        self.by_connection
            .entry(id)
            .or_default()
            .push(key.to_owned());
    }

    /// Ends the binding of `key`, if any (it was deleted).
    pub(super) fn release(&mut self, key: &str) {
        if let Some((id, _)) = self.holders.remove(key) {
            self.unlist(id, key);
        }
    }

    /// The keys connection `id` held, now released: it closed.
    pub(super) fn closed(&mut self, id: Id) -> Vec<String> {
        let keys = self.by_connection.remove(&id).unwrap_or_default();
        for key in &keys {
            self.holders.remove(key);
        }
        keys
    }

    fn unlist(&mut self, id: Id, key: &str) {
        if let Some(keys) = self.by_connection.get_mut(&id) {
            keys.retain(|held| held != key);
            if keys.is_empty() {
                self.by_connection.remove(&id);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_follows_its_owner_and_is_released_once() {
        let mut keys = SessionKeys::default();
        let (me, other) = ([1; 16], [2; 16]);
        assert!(keys.may_bind("alive/0", &me));
        keys.bind("alive/0", 7, me);
        assert!(!keys.may_bind("alive/0", &other));
        // The same client, reconnected, takes it over: the old connection's
        // close no longer releases it.
        keys.bind("alive/0", 9, me);
        assert!(keys.closed(7).is_empty());
        assert_eq!(keys.closed(9), ["alive/0"]);
        assert!(keys.may_bind("alive/0", &other));
        keys.bind("alive/1", 3, other);
        keys.release("alive/1");
        assert!(keys.closed(3).is_empty());
    }
}
