//! Connecting to the store a [`RendezvousConfig`] names: rank 0 hosts the
//! TCP store's server (and chooses where it listens), the others join;
//! with torchrun's agent store, every rank joins the agent's.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, ToSocketAddrs};

use super::{RendezvousConfig, StoreSpec};
use crate::{
    C10dStore, C10dStoreOptions, FileStore, PrefixStore, Result, Store, StoreError, TcpStore,
    TcpStoreOptions, TcpStoreServerOptions,
};

impl RendezvousConfig {
    /// Connects to the store this configuration names.
    ///
    /// With the TCP store, rank 0 starts the server on `MASTER_PORT` and
    /// keeps it alive as long as the returned store lives; it listens on
    /// `MASTER_ADDR` itself when that is a loopback address (a single-host
    /// job), otherwise on every interface (as torch does). Without
    /// `NCCL_RS_STORE_SECRET` it then takes clients of its own host only:
    /// a multi-host job sets the same secret on every rank (or, on a
    /// network it trusts, `NCCL_RS_STORE_ALLOW_UNAUTHENTICATED=1`, which
    /// lets anyone who reaches the port read and write every key). The
    /// other ranks connect as
    /// clients, retrying until the server is up or the timeout passes. With
    /// the file store, every rank opens the directory. With torchrun's
    /// agent store ([`StoreSpec::TorchAgent`]), every rank, rank 0 too,
    /// joins the agent's c10d TCPStore as a [`C10dStore`] client; a secret
    /// is then refused with [`StoreError::Config`], as c10d has no
    /// authentication.
    ///
    /// The store returned scopes every key under [`Self::namespace`], so
    /// two runs sharing one store never see each other's keys.
    pub fn connect(&self) -> Result<Box<dyn Store>> {
        self.connect_scoped(self.rank == 0)
    }

    /// Connects to the store this configuration names as a client,
    /// whatever the rank: for a process that joins a job already running
    /// (a new process of a grow), whose store another process hosts.
    ///
    /// As [`RendezvousConfig::connect`] otherwise: the same stores, the
    /// same namespace.
    pub fn connect_as_client(&self) -> Result<Box<dyn Store>> {
        self.connect_scoped(false)
    }

    /// The store, scoped to the namespace; `host`: this process hosts the
    /// TCP store's server.
    fn connect_scoped(&self, host: bool) -> Result<Box<dyn Store>> {
        let store = self.connect_unscoped(host)?;
        Ok(Box::new(PrefixStore::new(store, self.namespace.clone())?))
    }

    fn connect_unscoped(&self, host: bool) -> Result<Box<dyn Store>> {
        match &self.store {
            StoreSpec::File { dir } => Ok(Box::new(FileStore::open(dir.clone(), self.timeout)?)),
            StoreSpec::TorchAgent { addr, port } => {
                if self.secret.is_some() {
                    return Err(StoreError::Config {
                        var: "NCCL_RS_STORE_SECRET".into(),
                        message: "NCCL_RS_STORE_SECRET is set, but torchrun's agent store \
                                  (TORCHELASTIC_USE_AGENT_STORE) is torch's c10d TCPStore, which \
                                  has no authentication; unset NCCL_RS_STORE_SECRET, or launch \
                                  without the agent store to use nccl-group's own TCP store"
                            .into(),
                    });
                }
                let options = C10dStoreOptions::default()
                    .with_timeout(self.timeout)
                    .with_connect_timeout(self.timeout);
                Ok(Box::new(C10dStore::connect_with(addr, *port, options)?))
            }
            StoreSpec::Tcp { addr, port } => {
                let mut client = TcpStoreOptions::default()
                    .with_timeout(self.timeout)
                    .with_connect_timeout(self.timeout);
                let mut server = TcpStoreServerOptions::default()
                    .with_unauthenticated_remote(self.allow_unauthenticated_remote);
                if let Some(secret) = &self.secret {
                    client = client.with_secret(secret.as_bytes());
                    server = server.with_secret(secret.as_bytes());
                }
                if host {
                    let bind = bind_addr(addr, *port)?;
                    Ok(Box::new(TcpStore::host(bind, server, client)?))
                } else {
                    Ok(Box::new(TcpStore::connect(addr, *port, client)?))
                }
            }
        }
    }
}

/// Where rank 0 listens: `MASTER_ADDR` itself when it is loopback, otherwise
/// the unspecified address of its family.
fn bind_addr(host: &str, port: u16) -> Result<SocketAddr> {
    let resolved: Vec<SocketAddr> = (host, port)
        .to_socket_addrs()
        .map_err(|e| {
            StoreError::io(
                format!("resolving MASTER_ADDR={host:?} to start the TCP store server"),
                e,
            )
        })?
        .collect();
    let Some(first) = resolved.first() else {
        return Err(StoreError::io(
            format!("resolving MASTER_ADDR={host:?} to start the TCP store server"),
            std::io::Error::new(std::io::ErrorKind::NotFound, "no address"),
        ));
    };
    if resolved.iter().all(|a| a.ip().is_loopback()) {
        return Ok(*first);
    }
    let any = match first.ip() {
        IpAddr::V4(_) => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
        IpAddr::V6(_) => IpAddr::V6(Ipv6Addr::UNSPECIFIED),
    };
    Ok(SocketAddr::new(any, port))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;
    use std::time::Duration;

    #[test]
    fn bind_address_choice() {
        assert_eq!(
            bind_addr("127.0.0.1", 5).unwrap(),
            "127.0.0.1:5".parse().unwrap()
        );
        assert_eq!(bind_addr("::1", 5).unwrap(), "[::1]:5".parse().unwrap());
        assert_eq!(
            bind_addr("10.1.2.3", 5).unwrap(),
            "0.0.0.0:5".parse().unwrap()
        );
    }

    #[test]
    fn connect_file_store_from_config() {
        let dir = tempfile::tempdir().unwrap();
        let spec = format!("file:{}", dir.path().display());
        let map: HashMap<&str, String> = [
            ("RANK", "0".to_owned()),
            ("WORLD_SIZE", "1".to_owned()),
            ("NCCL_RS_STORE", spec),
            ("NCCL_RS_NAMESPACE", "connect-test".to_owned()),
            ("NCCL_RS_STORE_TIMEOUT_SECS", "3".to_owned()),
        ]
        .into_iter()
        .collect();
        let c = RendezvousConfig::from_vars(|n| map.get(n).cloned()).unwrap();
        let store = c.connect().unwrap();
        store.set("k", b"v").unwrap();
        assert_eq!(store.default_timeout(), Duration::from_secs(3));
        assert_eq!(store.get("k", Duration::from_millis(100)).unwrap(), b"v");
    }

    #[test]
    fn the_unauthenticated_opt_in_is_read_and_off_by_default() {
        let config = |value: Option<&str>| {
            let value = value.map(str::to_owned);
            RendezvousConfig::from_vars(move |n| match n {
                "RANK" => Some("0".to_owned()),
                "WORLD_SIZE" => Some("1".to_owned()),
                "MASTER_ADDR" => Some("node0".to_owned()),
                "MASTER_PORT" => Some("29500".to_owned()),
                "NCCL_RS_STORE_ALLOW_UNAUTHENTICATED" => value.clone(),
                _ => None,
            })
        };
        for (value, allowed) in [
            (None, false),
            (Some("1"), true),
            (Some("True"), true),
            (Some("0"), false),
            (Some(""), false),
            (Some("false"), false),
        ] {
            let c = config(value).unwrap();
            assert_eq!(c.allow_unauthenticated_remote, allowed, "{value:?}");
        }
        assert!(config(Some("yes")).is_err());
    }

    #[test]
    fn connect_tcp_rank0_hosts_and_rank1_joins() {
        // Port 0 is refused by from_vars, so pick a free port up front.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let vars = |rank: &'static str| {
            let port = port.to_string();
            move |n: &str| match n {
                "RANK" => Some(rank.to_owned()),
                "WORLD_SIZE" => Some("2".to_owned()),
                "MASTER_ADDR" => Some("127.0.0.1".to_owned()),
                "MASTER_PORT" => Some(port.clone()),
                // Rank 1's connect waits this long for rank 0's server: a
                // hang guard, however loaded the machine.
                "NCCL_RS_STORE_TIMEOUT_SECS" => Some("60".to_owned()),
                "NCCL_RS_STORE_SECRET" => Some("team".to_owned()),
                _ => None,
            }
        };
        let rank0 = RendezvousConfig::from_vars(vars("0"))
            .unwrap()
            .connect()
            .unwrap();
        let rank1 = RendezvousConfig::from_vars(vars("1"))
            .unwrap()
            .connect()
            .unwrap();
        rank0.set("uid", b"0xfeed").unwrap();
        assert_eq!(rank1.get("uid", Duration::from_secs(2)).unwrap(), b"0xfeed");
        assert_eq!(rank1.add("arrived", 1).unwrap(), 1);
        assert_eq!(rank0.add("arrived", 1).unwrap(), 2);
        drop(rank1);
        drop(rank0);
        // The server went with rank 0's store: the port is free again.
        std::net::TcpListener::bind(("127.0.0.1", port)).unwrap();
    }
}
