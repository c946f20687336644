//! The client's session keys ([`Store::set_session`](crate::Store::set_session)):
//! they live on one connection of their own, never pooled, so that the
//! server deletes them when this client goes (its process exits or is
//! killed) and not before.
//!
//! The client keeps each key's value. When that connection is found closed
//! (the server restarted, a network fault), the next request of any kind
//! that the server answers is followed by a new connection that registers
//! every key again: a live process's keys are absent only from the fault
//! until its next request.

use std::collections::BTreeMap;
use std::sync::{MutexGuard, PoisonError};

use super::super::wire::{self, OWNER_LEN, Owner, Request, Response};
use super::connection::{Connection, Failed};
use super::{TcpStore, op_name};
use crate::{Result, StoreError};

/// The connection that holds a client's session keys, and the keys.
pub(super) struct SessionLine {
    /// This client's name, which its keys are bound to: its next
    /// connection may take them over.
    owner: Owner,
    connection: Option<Connection>,
    keys: BTreeMap<String, Vec<u8>>,
}

impl SessionLine {
    /// No key yet, under a fresh random owner name.
    pub(super) fn new() -> Result<Self> {
        let nonce = wire::fresh_nonce()
            .map_err(|e| StoreError::io("naming this client's session keys", e))?;
        let mut owner = [0; OWNER_LEN];
        owner.copy_from_slice(&nonce[..OWNER_LEN]);
        Ok(SessionLine {
            owner,
            connection: None,
            keys: BTreeMap::new(),
        })
    }
}

impl TcpStore {
    fn session_line(&self) -> MutexGuard<'_, SessionLine> {
        self.sessions.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// [`Store::set_session`](crate::Store::set_session).
    pub(super) fn set_session_key(&self, key: &str, value: &[u8]) -> Result<()> {
        let op = op_name("set_session", key);
        if key.is_empty() {
            return Err(StoreError::InvalidArgument {
                what: "session key",
                given: crate::error::show_key(key),
                expected: "a non-empty key".to_owned(),
            });
        }
        self.check_limits(&op, &[key], &[value])?;
        let mut line = self.session_line();
        self.reopen_if_closed(&mut line)?;
        let SessionLine {
            owner, connection, ..
        } = &mut *line;
        if !self.register(connection, *owner, key, value)? {
            return Err(StoreError::InvalidArgument {
                what: "session key",
                given: crate::error::show_key(key),
                expected: "a key no other client holds as its session key (another process \
                           registered it and is still connected: give each process its own key)"
                    .to_owned(),
            });
        }
        line.keys.insert(key.to_owned(), value.to_vec());
        Ok(())
    }

    /// Forgets `key` as a session key (it is being deleted), so that a
    /// new connection does not register it again.
    pub(super) fn forget_session_key(&self, key: &str) {
        self.session_line().keys.remove(key);
    }

    /// Registers the session keys again on a new connection when theirs
    /// closed; left to the next request when another thread is at it, or
    /// when the server cannot be reached now.
    pub(super) fn renew_sessions(&self) {
        let Ok(mut line) = self.sessions.try_lock() else {
            return;
        };
        if !line.keys.is_empty() {
            let _ = self.reopen_if_closed(&mut line);
        }
    }

    /// A new connection, with every key of `line` registered on it, when
    /// `line` has none or its connection closed. A key another client took
    /// meanwhile is this client's no more: it is forgotten, and the others
    /// are registered all the same.
    fn reopen_if_closed(&self, line: &mut SessionLine) -> Result<()> {
        if line.connection.as_ref().is_some_and(|c| !c.is_stale()) {
            return Ok(());
        }
        // The new connection takes the keys over before the old one (if
        // only too old) closes, so the server never deletes them between.
        let (fresh, _) = self.connect_with_retry(self.options.connect_timeout, false)?;
        let SessionLine {
            owner,
            connection,
            keys,
        } = line;
        let old = connection.replace(fresh);
        let mut taken = Vec::new();
        for (key, value) in keys.iter() {
            if !self.register(connection, *owner, key, value)? {
                taken.push(key.clone());
            }
        }
        for key in taken {
            keys.remove(&key);
        }
        drop(old);
        Ok(())
    }

    /// Sends `SET_SESSION` for `key` under `owner` on `connection`:
    /// `Ok(false)` when another client holds the key. On any error the
    /// connection is dropped (its state is unknown) and the next call opens
    /// another.
    fn register(
        &self,
        connection: &mut Option<Connection>,
        owner: Owner,
        key: &str,
        value: &[u8],
    ) -> Result<bool> {
        let op = op_name("set_session", key);
        let request = Request::SetSession {
            key: key.to_owned(),
            value: value.to_vec(),
            owner,
        };
        let Some(open) = connection.as_mut() else {
            return Err(StoreError::ConnectionClosed {
                addr: self.addr.clone(),
                op,
            });
        };
        match self
            .exchange(open, &op, &request, self.margin())
            .map_err(Failed::into_error)
        {
            Ok(Response::Bool(registered)) => Ok(registered),
            Ok(other) => {
                *connection = None;
                Err(self.unexpected(&op, &other))
            }
            Err(error) => {
                *connection = None;
                Err(error)
            }
        }
    }
}
