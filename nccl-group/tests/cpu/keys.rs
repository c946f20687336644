//! Cache keys without a GPU: `DeviceList` validation and formatting, and
//! `CommKey`'s members and store keys.

use std::collections::HashSet;

use nccl_group::testing::{CommKey, DeviceList, Members};
use nccl_group::{GroupError, MAX_LOCAL_DEVICES};

fn list(ordinals: &[usize]) -> DeviceList {
    DeviceList::new(ordinals.iter().copied())
        .unwrap_or_else(|e| panic!("{ordinals:?} is a valid device list: {e}"))
}

/// The `InvalidArgument` parts of `DeviceList::new(ordinals)`, which must fail.
fn invalid(ordinals: &[usize]) -> (String, String, String) {
    match DeviceList::new(ordinals.iter().copied()) {
        Err(error @ GroupError::InvalidArgument { .. }) => {
            let message = error.to_string();
            let GroupError::InvalidArgument {
                argument,
                expected,
                given,
            } = error
            else {
                unreachable!()
            };
            assert_eq!(argument, "device list", "{message}");
            (expected, given, message)
        }
        Err(other) => panic!("{ordinals:?}: expected InvalidArgument, got {other:?}"),
        Ok(list) => panic!("{ordinals:?}: expected an error, got {list:?}"),
    }
}

#[test]
fn empty_device_list_is_rejected() {
    let (expected, given, message) = invalid(&[]);
    assert_eq!(given, "0");
    assert!(
        expected.contains(&format!("1 to {MAX_LOCAL_DEVICES}")),
        "{message}"
    );
    assert!(message.contains("device list"), "{message}");
}

#[test]
fn seventeen_devices_are_rejected_sixteen_accepted() {
    assert_eq!(MAX_LOCAL_DEVICES, 16);
    let sixteen: Vec<usize> = (0..16).collect();
    assert_eq!(list(&sixteen).len(), 16);
    let seventeen: Vec<usize> = (0..17).collect();
    let (expected, given, message) = invalid(&seventeen);
    assert_eq!(given, "17", "{message}");
    assert!(expected.contains("16"), "{message}");
}

#[test]
fn a_device_twice_is_rejected() {
    for ordinals in [&[0, 0][..], &[0, 1, 0], &[3, 2, 1, 2]] {
        let (expected, given, message) = invalid(ordinals);
        let repeated = if ordinals[0] == 3 { 2 } else { 0 };
        assert!(
            given.contains(&format!("device {repeated}")),
            "{ordinals:?}: {message}"
        );
        assert!(expected.contains("one tensor per device"), "{message}");
        assert!(
            message.contains("NCCL allows one rank per GPU"),
            "{message}"
        );
    }
}

#[test]
fn ordinals_past_u16_are_rejected() {
    let too_big = usize::from(u16::MAX) + 1;
    let (expected, given, message) = invalid(&[0, too_big]);
    assert_eq!(given, too_big.to_string(), "{message}");
    assert!(expected.contains("device ordinal"), "{message}");
    let (_, given, _) = invalid(&[usize::MAX]);
    assert_eq!(given, usize::MAX.to_string());
    // The largest u16 is fine.
    assert_eq!(
        list(&[usize::from(u16::MAX)]).iter().collect::<Vec<_>>(),
        [65535]
    );
}

#[test]
fn display_debug_and_accessors() {
    let devices = list(&[0, 1, 3]);
    assert_eq!(devices.to_string(), "0,1,3");
    assert_eq!(format!("{devices:?}"), "[0, 1, 3]");
    assert_eq!(devices.len(), 3);
    assert!(!devices.is_empty());
    assert_eq!(devices.iter().collect::<Vec<_>>(), [0, 1, 3]);
    assert_eq!(devices.iter().len(), 3);

    let one = DeviceList::one(7).expect("one device");
    assert_eq!(one.to_string(), "7");
    assert_eq!(one, list(&[7]));
    assert!(DeviceList::one(usize::from(u16::MAX) + 1).is_err());
}

#[test]
fn device_lists_are_ordered_and_hashable() {
    // The order matters: rank i of the communicator is on devices[i].
    assert_ne!(list(&[0, 1]), list(&[1, 0]));
    let mut set = HashSet::new();
    assert!(set.insert(list(&[0, 1])));
    assert!(set.insert(list(&[1, 0])));
    assert!(!set.insert(list(&[0, 1])));
    // Copy: a lookup key costs no allocation.
    let a = list(&[2, 5]);
    let b = a;
    assert_eq!(a, b);
}

#[test]
fn collective_key_members() {
    let key = CommKey::Collective(list(&[0, 1]));
    assert_eq!(key.devices(), &list(&[0, 1]));
    for world in 1..6 {
        for rank in 0..world {
            // (processes, index among them, creator rank)
            assert_eq!(key.members(rank, world), members(world, rank, 0));
        }
    }
}

#[test]
fn pair_key_members() {
    let devices = list(&[4]);
    let key = CommKey::PointToPoint {
        low: 1,
        high: 3,
        devices,
    };
    assert_eq!(key.devices(), &devices);
    assert_eq!(
        key.members(1, 4),
        members(2, 0, 1),
        "the lower rank creates"
    );
    assert_eq!(key.members(3, 4), members(2, 1, 1), "the higher rank joins");
}

#[test]
fn store_keys_are_scoped_by_group_generation_class_and_sequence() {
    let devices = list(&[0, 1]);
    let collective = CommKey::Collective(devices);
    let pair = CommKey::PointToPoint {
        low: 0,
        high: 2,
        devices,
    };
    assert_eq!(collective.store_key("g", 3, 0).unwrap(), "g/3/comm/x2/0");
    assert_eq!(pair.store_key("g", 3, 5).unwrap(), "g/3/p2p/0-2/x2/5");

    let keys: HashSet<String> = [
        collective.store_key("g", 0, 0).unwrap(),
        collective.store_key("g", 1, 0).unwrap(),
        collective.store_key("g", 0, 1).unwrap(),
        collective.store_key("h", 0, 0).unwrap(),
        pair.store_key("g", 0, 0).unwrap(),
        CommKey::PointToPoint {
            low: 1,
            high: 2,
            devices,
        }
        .store_key("g", 0, 0)
        .unwrap(),
        CommKey::Collective(list(&[0]))
            .store_key("g", 0, 0)
            .unwrap(),
    ]
    .into_iter()
    .collect();
    assert_eq!(keys.len(), 7, "every key is distinct: {keys:?}");
}

#[test]
fn store_keys_ignore_which_local_devices() {
    // Processes on different GPUs (GPU = local rank) must meet.
    assert_eq!(
        CommKey::Collective(list(&[1, 0]))
            .store_key("g", 0, 0)
            .unwrap(),
        CommKey::Collective(list(&[2, 3]))
            .store_key("g", 0, 0)
            .unwrap()
    );
}

/// The members of a key, field by field.
fn members(processes: usize, index: usize, creator: usize) -> Members {
    Members {
        processes,
        index,
        creator,
    }
}
