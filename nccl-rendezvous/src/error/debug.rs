//! `Debug` for [`StoreError`] that leads with the message.

use std::fmt;

use super::StoreError;

impl StoreError {
    /// The variant's name, for `Debug`.
    fn variant(&self) -> &'static str {
        match self {
            StoreError::Timeout { .. } => "Timeout",
            StoreError::NotAnInteger { .. } => "NotAnInteger",
            StoreError::Overflow { .. } => "Overflow",
            StoreError::Connect { .. } => "Connect",
            StoreError::Bind { .. } => "Bind",
            StoreError::ConnectionClosed { .. } => "ConnectionClosed",
            StoreError::Unresponsive { .. } => "Unresponsive",
            StoreError::Auth { .. } => "Auth",
            StoreError::Integrity { .. } => "Integrity",
            StoreError::OverLimit { .. } => "OverLimit",
            StoreError::TooManyConnections { .. } => "TooManyConnections",
            StoreError::FrameTooLarge { .. } => "FrameTooLarge",
            StoreError::Protocol { .. } => "Protocol",
            StoreError::Remote { .. } => "Remote",
            StoreError::Io { .. } => "Io",
            StoreError::Lock { .. } => "Lock",
            StoreError::InvalidArgument { .. } => "InvalidArgument",
            StoreError::Unsupported { .. } => "Unsupported",
            StoreError::Absent { .. } => "Absent",
            StoreError::PeerFailed { .. } => "PeerFailed",
            StoreError::Excluded { .. } => "Excluded",
            StoreError::TooFewSurvivors { .. } => "TooFewSurvivors",
            StoreError::Config { .. } => "Config",
        }
    }
}

impl fmt::Debug for StoreError {
    /// `WORLD_SIZE is not set ... (nccl_rendezvous::StoreError::Config,
    /// kind Config)`: the message and its sources on one line, then the
    /// variant and the kind.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{self}")?;
        let mut source = std::error::Error::source(self);
        while let Some(error) = source {
            write!(f, ": {error}")?;
            source = error.source();
        }
        write!(
            f,
            " (nccl_rendezvous::StoreError::{}, kind {:?})",
            self.variant(),
            self.kind()
        )
    }
}

#[cfg(test)]
mod tests {
    use std::io;

    use super::*;

    #[test]
    fn debug_leads_with_the_message_and_its_sources() {
        let config = StoreError::Config {
            var: "WORLD_SIZE".into(),
            message: "WORLD_SIZE is not set".into(),
        };
        assert_eq!(
            format!("{config:?}"),
            "WORLD_SIZE is not set (nccl_rendezvous::StoreError::Config, kind Config)"
        );
        let io = StoreError::io("reading a key", io::Error::other("disk gone"));
        let text = format!("{io:?}");
        assert!(text.starts_with(&format!("{io}: disk gone")), "{text}");
        assert!(
            text.ends_with("(nccl_rendezvous::StoreError::Io, kind Store)"),
            "{text}"
        );
    }
}
