//! The bad-input rows of the TCP store's security: its settings, the
//! handshake's refusals, the per-request limits and the quota. Rows that
//! talk to a server run one on 127.0.0.1 and show its port as `<port>`,
//! so that the table does not change from run to run.

use std::time::Duration;

use nccl_group::{
    RendezvousConfig, Store, StoreError, TcpStore, TcpStoreOptions, TcpStoreServer,
    TcpStoreServerOptions,
};

use super::{Row, calls, err};

/// Client options whose time limits only a hung server outlasts, however
/// loaded the machine: every row's refusal comes at once.
fn client() -> TcpStoreOptions {
    let patience = Duration::from_secs(60);
    TcpStoreOptions::default()
        .with_timeout(patience)
        .with_connect_timeout(patience)
        .with_io_margin(patience)
}

/// Runs `call` against a fresh server with `server` options, and returns
/// its error's text with the server's port as `<port>`.
fn against<T>(
    server: TcpStoreServerOptions,
    call: impl FnOnce(std::net::SocketAddr) -> Result<T, StoreError>,
) -> String {
    let server = TcpStoreServer::bind("127.0.0.1:0", server).expect("a server on 127.0.0.1");
    let addr = server.local_addr();
    err(call(addr)).replace(&addr.to_string(), "127.0.0.1:<port>")
}

/// The error of binding a server on an ephemeral local port with `options`.
pub(super) fn bind(options: TcpStoreServerOptions) -> String {
    err(TcpStoreServer::bind("127.0.0.1:0", options))
}

fn with_secret(secret: &[u8]) -> TcpStoreServerOptions {
    TcpStoreServerOptions::default().with_secret(secret.to_vec())
}

pub(super) fn rows() -> Vec<Row> {
    [
        calls(
            "store",
            "TcpStoreServer::bind",
            &[
                (
                    "handshake_timeout Duration::MAX",
                    &["handshake_timeout", "at most 10 years", "default 10 s"],
                    || bind(TcpStoreServerOptions::default().with_handshake_timeout(Duration::MAX)),
                ),
                (
                    "max_keys_per_request 0",
                    &["max_keys_per_request 0", "at least 1 (default 131072)"],
                    || bind(TcpStoreServerOptions::default().with_max_keys_per_request(0)),
                ),
                (
                    "max_stored_bytes 0",
                    &["max_stored_bytes 0", "at least 1 (default 1073741824)"],
                    || bind(TcpStoreServerOptions::default().with_max_stored_bytes(0)),
                ),
                (
                    "empty secret",
                    &["invalid secret \"\"", "a non-empty secret, or none"],
                    || bind(with_secret(b"")),
                ),
            ],
        ),
        calls(
            "store",
            "TcpStore::connect",
            &[
                (
                    "empty secret",
                    &["invalid secret \"\"", "a non-empty secret, or none"],
                    || {
                        err(TcpStore::connect(
                            "127.0.0.1",
                            1,
                            client().with_secret(Vec::new()),
                        ))
                    },
                ),
                (
                    "another secret than the server's",
                    &["server's proof does not match", "same shared secret"],
                    || {
                        against(with_secret(b"server"), |addr| {
                            TcpStore::connect_to(addr, client().with_secret(b"client".to_vec()))
                        })
                    },
                ),
                (
                    "no secret, the server has one",
                    &[
                        "requires a shared secret",
                        "presented none",
                        "NCCL_RS_STORE_SECRET",
                    ],
                    || {
                        against(with_secret(b"server"), |addr| {
                            TcpStore::connect_to(addr, client())
                        })
                    },
                ),
                (
                    "a secret, the server has none",
                    &[
                        "holds no secret, but this client does",
                        "NCCL_RS_STORE_SECRET",
                    ],
                    || {
                        against(TcpStoreServerOptions::default(), |addr| {
                            TcpStore::connect_to(addr, client().with_secret(b"client".to_vec()))
                        })
                    },
                ),
            ],
        ),
        calls(
            "store",
            "TcpStore::set",
            &[(
                "value over max_value_len 64",
                &[
                    "value of 65 bytes",
                    "max_value_len of 64",
                    "nothing stored was changed",
                ],
                || {
                    against(
                        TcpStoreServerOptions::default().with_max_value_len(64),
                        |addr| TcpStore::connect_to(addr, client())?.set("k", &[0; 65]),
                    )
                },
            )],
        ),
        calls(
            "store",
            "TcpStore::wait",
            &[(
                "5 keys, max_keys_per_request 4",
                &["naming 5 keys", "max_keys_per_request of 4"],
                || {
                    against(
                        TcpStoreServerOptions::default().with_max_keys_per_request(4),
                        |addr| {
                            TcpStore::connect_to(addr, client())?
                                .wait(&["a", "b", "c", "d", "e"], Duration::from_secs(1))
                        },
                    )
                },
            )],
        ),
        calls(
            "store",
            "TcpStore::set",
            &[(
                "a third key, max_stored_keys 2",
                &[
                    "would make 3 keys",
                    "max_stored_keys of 2",
                    "nothing stored was changed",
                ],
                || {
                    against(
                        TcpStoreServerOptions::default().with_max_stored_keys(2),
                        |addr| {
                            let store = TcpStore::connect_to(addr, client())?;
                            store.set("a", b"1")?;
                            store.set("b", b"2")?;
                            store.set("c", b"3")
                        },
                    )
                },
            )],
        ),
        calls(
            "store",
            "RendezvousConfig::from_vars",
            &[(
                "NCCL_RS_STORE_ALLOW_UNAUTHENTICATED=maybe",
                &[
                    "NCCL_RS_STORE_ALLOW_UNAUTHENTICATED=\"maybe\" is not a boolean",
                    "expected 1 or true",
                ],
                || {
                    err(RendezvousConfig::from_vars(|name| {
                        match name {
                            "RANK" => Some("0"),
                            "WORLD_SIZE" => Some("2"),
                            "MASTER_ADDR" => Some("node0"),
                            "MASTER_PORT" => Some("29500"),
                            "NCCL_RS_STORE_ALLOW_UNAUTHENTICATED" => Some("maybe"),
                            _ => None,
                        }
                        .map(str::to_owned)
                    }))
                },
            )],
        ),
    ]
    .concat()
}
