//! Cache keys: the ordered list of local devices, and for point-to-point
//! communicators the pair of process ranks. Fixed-size and `Copy`, so a
//! lookup allocates nothing.

use crate::devices::DeviceList;
use crate::error::{GroupError, Result};
use crate::protocols::{COMMUNICATOR, PAIR};
use nccl_rendezvous::meet::Scope;

/// The device lists a caller may give, refused with
/// [`GroupError::InvalidArgument`] otherwise.
impl DeviceList {
    /// One device.
    ///
    /// # Errors
    /// An ordinal past `u16` (as [`DeviceList::new`]).
    pub fn one(ordinal: usize) -> Result<Self> {
        match u16::try_from(ordinal) {
            Ok(ordinal) => Ok(Self::single(ordinal)),
            Err(_) => Self::new([ordinal].into_iter()),
        }
    }

    /// The devices in call order.
    ///
    /// # Errors
    /// None, more than [`MAX_LOCAL_DEVICES`](crate::MAX_LOCAL_DEVICES), a device twice, or an
    /// ordinal past `u16`.
    pub fn new(ordinals: impl ExactSizeIterator<Item = usize>) -> Result<Self> {
        Self::checked(ordinals).map_err(|(expected, given)| GroupError::InvalidArgument {
            argument: "device list",
            expected,
            given,
        })
    }
}

/// The part of a [`CommKey`] every process of the communicator agrees on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CommClass {
    /// All processes, with this many local devices each.
    Collective {
        /// Local devices per process.
        devices: usize,
    },
    /// Two processes, with this many local devices each.
    PointToPoint {
        /// The lower process rank.
        low: usize,
        /// The higher process rank.
        high: usize,
        /// Local devices per process.
        devices: usize,
    },
}

/// Which communicator a call needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CommKey {
    /// Every process of the group, on these local devices.
    Collective(DeviceList),
    /// Two processes (lower rank first), on these local devices.
    PointToPoint {
        /// The lower process rank.
        low: usize,
        /// The higher process rank.
        high: usize,
        /// The local devices.
        devices: DeviceList,
    },
}

impl CommKey {
    /// The local devices.
    pub fn devices(&self) -> &DeviceList {
        match self {
            CommKey::Collective(devices) | CommKey::PointToPoint { devices, .. } => devices,
        }
    }

    /// What processes agree on about this key: its kind, the number of
    /// local devices and (for pairs) the ranks, but not which local
    /// devices, since each process may use different ones (one GPU per
    /// process, GPU = local rank).
    pub fn class(&self) -> CommClass {
        match *self {
            CommKey::Collective(devices) => CommClass::Collective {
                devices: devices.len(),
            },
            CommKey::PointToPoint { low, high, devices } => CommClass::PointToPoint {
                low,
                high,
                devices: devices.len(),
            },
        }
    }

    /// The store key a communicator's processes meet under (its unique
    /// id is shared at `<store key>/share/unique-id`): the key's own
    /// scope under group `group`'s generation `generation`.
    ///
    /// # Errors
    /// [`GroupError::Store`] for a group name with an empty
    /// `/`-separated part.
    pub fn store_key(&self, group: &str, generation: u64, sequence: u64) -> Result<String> {
        let generation = Scope::path(group)?.generation(generation);
        Ok(self.scope(&generation, sequence)?.to_string())
    }

    /// The scope a communicator's processes meet in, below a generation's
    /// scope: naming the key's class and its `sequence` number among the
    /// keys of that class, in order of first use (the same on every
    /// process, as every process issues the group's operations in the
    /// same order).
    ///
    /// # Errors
    /// None in practice: every part is a number or a fixed name.
    pub(crate) fn scope(&self, generation: &Scope, sequence: u64) -> Result<Scope> {
        let class = match self.class() {
            CommClass::Collective { devices } => generation
                .clone()
                .purpose(COMMUNICATOR)?
                .purpose(&format!("x{devices}"))?,
            CommClass::PointToPoint { low, high, devices } => generation
                .clone()
                .purpose(PAIR)?
                .purpose(&format!("{low}-{high}"))?
                .purpose(&format!("x{devices}"))?,
        };
        Ok(class.index(sequence))
    }

    /// The rank of the process at `index` among this key's processes (see
    /// [`CommKey::members`]): the index itself for a collective key, the
    /// lower then the higher rank for a pair.
    pub fn process_rank(&self, index: usize) -> usize {
        match self {
            CommKey::Collective(_) => index,
            CommKey::PointToPoint { low, high, .. } => {
                if index == 0 {
                    *low
                } else {
                    *high
                }
            }
        }
    }

    /// The processes of this key's communicators, seen from process `rank`
    /// of `world_size`.
    pub fn members(&self, rank: usize, world_size: usize) -> Members {
        match self {
            CommKey::Collective(_) => Members {
                processes: world_size,
                index: rank,
                creator: 0,
            },
            CommKey::PointToPoint { low, .. } => Members {
                processes: 2,
                index: usize::from(rank != *low),
                creator: *low,
            },
        }
    }
}

/// The processes of a key's communicators ([`CommKey::members`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Members {
    /// How many processes take part.
    pub processes: usize,
    /// This process's index among them.
    pub index: usize,
    /// The rank of the process that creates the unique id.
    pub creator: usize,
}
