//! Where a protocol's keys live: a typed path of parts, so that no crate
//! above builds a store key by hand.
//!
//! A [`Scope`] starts at a group's name and goes down by generation,
//! purpose and index (`Scope::group("trainer")?.generation(2).purpose("grow")`
//! is `trainer/2/grow`); [`Scope::path`] starts at a nested name
//! (`trainer/sub0.1`, one part a name) and [`Scope::root`] at the store
//! itself. [`Scope::key`] names one key in it and
//! [`Scope::store`] (or [`Scope::meeting`]) hands out the store that keeps
//! every key of a protocol below it. Every part is checked once, when it
//! is added: a part is never empty and never holds `/`, so two different
//! scopes never share a key.

use std::fmt;
use std::sync::Arc;

use super::Meeting;
use crate::error::show_key;
use crate::{PrefixStore, Result, Store, StoreError};

/// A path of store-key parts below which a protocol keeps its keys.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Scope {
    parts: Vec<String>,
}

impl Scope {
    /// The scope of group `name`'s keys.
    ///
    /// # Errors
    /// [`StoreError::InvalidArgument`] for an empty name or one with `/`.
    pub fn group(name: &str) -> Result<Self> {
        Scope { parts: Vec::new() }.part("group name", name)
    }

    /// The scope of a `/`-separated path of names (a nested group's name,
    /// or a scope read back from the store), one part a name.
    ///
    /// # Errors
    /// [`StoreError::InvalidArgument`] for an empty path or one with an
    /// empty part.
    pub fn path(path: &str) -> Result<Self> {
        path.split('/')
            .try_fold(Scope::root(), |scope, part| scope.part("scope path", part))
    }

    /// The empty scope: keys at the top of the store they are given to.
    #[must_use]
    pub fn root() -> Self {
        Scope { parts: Vec::new() }
    }

    /// The scope of generation `generation` below this one.
    #[must_use]
    pub fn generation(self, generation: u64) -> Self {
        self.number(generation)
    }

    /// The scope of the protocol `purpose` below this one (`"failed"`,
    /// `"grow"`, ...): a name a crate keeps with its protocol.
    ///
    /// # Errors
    /// [`StoreError::InvalidArgument`] for an empty purpose or one with `/`.
    pub fn purpose(self, purpose: &str) -> Result<Self> {
        self.part("scope purpose", purpose)
    }

    /// The scope of the `index`-th instance of a protocol below this one
    /// (an attempt, a split).
    #[must_use]
    pub fn index(self, index: u64) -> Self {
        self.number(index)
    }

    /// This scope below `outer` (a sub-group's keys below its parent's).
    #[must_use]
    pub fn within(self, outer: &Scope) -> Self {
        Scope {
            parts: outer.parts.iter().chain(&self.parts).cloned().collect(),
        }
    }

    /// The full key of `leaf` in this scope (`leaf` itself in the root
    /// scope).
    pub fn key(&self, leaf: impl fmt::Display) -> String {
        if self.parts.is_empty() {
            leaf.to_string()
        } else {
            format!("{self}/{leaf}")
        }
    }

    /// `store` with every key below this scope (nested [`PrefixStore`]s,
    /// one a part).
    ///
    /// # Errors
    /// None in practice: every part was checked when it was added.
    pub fn store(&self, store: &Arc<dyn Store>) -> Result<Arc<dyn Store>> {
        self.parts
            .iter()
            .try_fold(Arc::clone(store), |store, part| {
                PrefixStore::new(store, part.as_str())
                    .map(|scoped| Arc::new(scoped) as Arc<dyn Store>)
            })
    }

    /// A meeting of `world_size` ranks in this scope of `store`, as `rank`.
    ///
    /// # Errors
    /// As [`Meeting::new`].
    pub fn meeting(
        &self,
        store: &Arc<dyn Store>,
        rank: usize,
        world_size: usize,
    ) -> Result<Meeting<Arc<dyn Store>>> {
        Meeting::new(self.store(store)?, rank, world_size)
    }

    fn number(mut self, number: u64) -> Self {
        self.parts.push(number.to_string());
        self
    }

    fn part(mut self, what: &'static str, part: &str) -> Result<Self> {
        if part.is_empty() || part.contains('/') {
            return Err(StoreError::InvalidArgument {
                what,
                given: show_key(part),
                expected: "a non-empty name without '/' (each part of a scope is one name)"
                    .to_string(),
            });
        }
        self.parts.push(part.to_string());
        Ok(self)
    }
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.parts.join("/"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::InProcessStore;

    #[test]
    fn a_scope_is_its_parts_joined() {
        let scope = Scope::group("trainer")
            .unwrap()
            .generation(2)
            .purpose("grow")
            .unwrap()
            .index(7);
        assert_eq!(scope.to_string(), "trainer/2/grow/7");
        assert_eq!(scope.key("tickets"), "trainer/2/grow/7/tickets");
        let sub = Scope::group("sub0").unwrap().within(&scope);
        assert_eq!(sub.to_string(), "trainer/2/grow/7/sub0");
    }

    #[test]
    fn a_path_is_one_part_a_name_and_the_root_has_none() {
        let path = Scope::path("trainer/sub0.1").unwrap();
        assert_eq!(
            path,
            Scope::group("trainer").unwrap().purpose("sub0.1").unwrap()
        );
        assert_eq!(
            path.clone().generation(0).key("failed"),
            "trainer/sub0.1/0/failed"
        );
        assert_eq!(Scope::root().to_string(), "");
        assert_eq!(Scope::root().key("instances"), "instances");
        assert_eq!(path.clone().within(&Scope::root()), path);
        for bad in ["", "a//b", "/a", "a/"] {
            let error = Scope::path(bad).unwrap_err();
            assert!(error.to_string().contains("scope path"), "{error}");
        }
    }

    #[test]
    fn an_empty_part_or_one_with_a_slash_is_refused() {
        for bad in ["", "a/b"] {
            let error = Scope::group(bad).unwrap_err();
            assert!(
                error.to_string().contains("a non-empty name without '/'"),
                "{error}"
            );
            let error = Scope::group("g").unwrap().purpose(bad).unwrap_err();
            assert!(error.to_string().contains("scope purpose"), "{error}");
        }
    }

    #[test]
    fn the_store_of_a_scope_keeps_its_keys_below_it() {
        let root: Arc<dyn Store> = Arc::new(InProcessStore::new());
        let scope = Scope::group("g")
            .unwrap()
            .generation(0)
            .purpose("failed")
            .unwrap();
        scope.store(&root).unwrap().set("3", b"x").unwrap();
        assert_eq!(
            root.get(&scope.key(3), std::time::Duration::from_secs(1))
                .unwrap(),
            b"x"
        );
        assert_eq!(scope.meeting(&root, 0, 1).unwrap().world_size(), 1);
    }
}
