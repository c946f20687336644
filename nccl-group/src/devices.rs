//! [`DeviceList`]: the ordered list of local devices an operation runs
//! on, fixed-size and `Copy`, which the flight recorder keeps and the
//! communicator cache keys on.

use std::fmt;

/// The most local GPUs one process may drive in one call.
pub const MAX_LOCAL_DEVICES: usize = 16;

/// An ordered list of local device ordinals.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct DeviceList {
    len: u8,
    ordinals: [u16; MAX_LOCAL_DEVICES],
}

impl DeviceList {
    /// The devices in call order, or what was expected and what was
    /// given where they are not a list: none, more than
    /// [`MAX_LOCAL_DEVICES`], a device twice, or an ordinal past `u16`.
    pub(crate) fn checked(
        ordinals: impl ExactSizeIterator<Item = usize>,
    ) -> std::result::Result<Self, (String, String)> {
        let count = ordinals.len();
        if count == 0 || count > MAX_LOCAL_DEVICES {
            return Err((
                format!("1 to {MAX_LOCAL_DEVICES} tensors"),
                format!("{count}"),
            ));
        }
        let mut list = Self {
            len: count as u8,
            ordinals: [0; MAX_LOCAL_DEVICES],
        };
        for (index, ordinal) in ordinals.enumerate() {
            let ordinal = u16::try_from(ordinal).map_err(|_| {
                (
                    format!("device ordinals up to {}", u16::MAX),
                    ordinal.to_string(),
                )
            })?;
            if list.ordinals[..index].contains(&ordinal) {
                return Err((
                    "one tensor per device (NCCL allows one rank per GPU)".into(),
                    format!("two tensors on device {ordinal}"),
                ));
            }
            list.ordinals[index] = ordinal;
        }
        Ok(list)
    }

    /// The list of one device: what every single-device operation looks
    /// up, with no check to run.
    #[cfg(feature = "cuda")]
    #[inline]
    pub(crate) fn single(ordinal: u16) -> Self {
        let mut ordinals = [0; MAX_LOCAL_DEVICES];
        ordinals[0] = ordinal;
        Self { len: 1, ordinals }
    }

    /// The number of devices.
    pub fn len(&self) -> usize {
        self.len as usize
    }

    /// Always false: a list has at least one device.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The ordinals.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = usize> + '_ {
        self.ordinals[..self.len()].iter().map(|&o| o as usize)
    }
}

impl fmt::Debug for DeviceList {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl fmt::Display for DeviceList {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (index, ordinal) in self.iter().enumerate() {
            if index > 0 {
                f.write_str(",")?;
            }
            write!(f, "{ordinal}")?;
        }
        Ok(())
    }
}
