//! The bad-input rows of the TCP store's security: its settings, the
//! handshake's refusals, the per-request limits and the quota. Rows that
//! talk to a server run one on 127.0.0.1 and show its port as `<port>`,
//! so that the table does not change from run to run.

use std::time::Duration;

use nccl_group::{
    RendezvousConfig, Store, StoreError, TcpStore, TcpStoreOptions, TcpStoreServer,
    TcpStoreServerOptions,
};

use super::{Row, err};

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

fn with_secret(secret: &[u8]) -> TcpStoreServerOptions {
    TcpStoreServerOptions::default().with_secret(secret.to_vec())
}

pub(super) fn rows() -> Vec<Row> {
    vec![
        Row {
            area: "store",
            call: "TcpStoreServer::bind",
            input: "handshake_timeout Duration::MAX",
            expect: &["handshake_timeout", "at most 10 years", "default 10 s"],
            run: || {
                err(TcpStoreServer::bind(
                    "127.0.0.1:0",
                    TcpStoreServerOptions::default().with_handshake_timeout(Duration::MAX),
                ))
            },
        },
        Row {
            area: "store",
            call: "TcpStoreServer::bind",
            input: "max_keys_per_request 0",
            expect: &["max_keys_per_request 0", "at least 1 (default 131072)"],
            run: || {
                err(TcpStoreServer::bind(
                    "127.0.0.1:0",
                    TcpStoreServerOptions::default().with_max_keys_per_request(0),
                ))
            },
        },
        Row {
            area: "store",
            call: "TcpStoreServer::bind",
            input: "max_stored_bytes 0",
            expect: &["max_stored_bytes 0", "at least 1 (default 1073741824)"],
            run: || {
                err(TcpStoreServer::bind(
                    "127.0.0.1:0",
                    TcpStoreServerOptions::default().with_max_stored_bytes(0),
                ))
            },
        },
        Row {
            area: "store",
            call: "TcpStoreServer::bind",
            input: "empty secret",
            expect: &["invalid secret \"\"", "a non-empty secret, or none"],
            run: || err(TcpStoreServer::bind("127.0.0.1:0", with_secret(b""))),
        },
        Row {
            area: "store",
            call: "TcpStore::connect",
            input: "empty secret",
            expect: &["invalid secret \"\"", "a non-empty secret, or none"],
            run: || {
                err(TcpStore::connect(
                    "127.0.0.1",
                    1,
                    client().with_secret(Vec::new()),
                ))
            },
        },
        Row {
            area: "store",
            call: "TcpStore::connect",
            input: "another secret than the server's",
            expect: &["server's proof does not match", "same shared secret"],
            run: || {
                against(with_secret(b"server"), |addr| {
                    TcpStore::connect_to(addr, client().with_secret(b"client".to_vec()))
                })
            },
        },
        Row {
            area: "store",
            call: "TcpStore::connect",
            input: "no secret, the server has one",
            expect: &[
                "requires a shared secret",
                "presented none",
                "NCCL_RS_STORE_SECRET",
            ],
            run: || {
                against(with_secret(b"server"), |addr| {
                    TcpStore::connect_to(addr, client())
                })
            },
        },
        Row {
            area: "store",
            call: "TcpStore::connect",
            input: "a secret, the server has none",
            expect: &[
                "holds no secret, but this client does",
                "NCCL_RS_STORE_SECRET",
            ],
            run: || {
                against(TcpStoreServerOptions::default(), |addr| {
                    TcpStore::connect_to(addr, client().with_secret(b"client".to_vec()))
                })
            },
        },
        Row {
            area: "store",
            call: "TcpStore::set",
            input: "value over max_value_len 64",
            expect: &[
                "value of 65 bytes",
                "max_value_len of 64",
                "nothing stored was changed",
            ],
            run: || {
                against(
                    TcpStoreServerOptions::default().with_max_value_len(64),
                    |addr| TcpStore::connect_to(addr, client())?.set("k", &[0; 65]),
                )
            },
        },
        Row {
            area: "store",
            call: "TcpStore::wait",
            input: "5 keys, max_keys_per_request 4",
            expect: &["naming 5 keys", "max_keys_per_request of 4"],
            run: || {
                against(
                    TcpStoreServerOptions::default().with_max_keys_per_request(4),
                    |addr| {
                        TcpStore::connect_to(addr, client())?
                            .wait(&["a", "b", "c", "d", "e"], Duration::from_secs(1))
                    },
                )
            },
        },
        Row {
            area: "store",
            call: "TcpStore::set",
            input: "a third key, max_stored_keys 2",
            expect: &[
                "would make 3 keys",
                "max_stored_keys of 2",
                "nothing stored was changed",
            ],
            run: || {
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
        },
        Row {
            area: "store",
            call: "RendezvousConfig::from_vars",
            input: "NCCL_RS_STORE_ALLOW_UNAUTHENTICATED=maybe",
            expect: &[
                "NCCL_RS_STORE_ALLOW_UNAUTHENTICATED=\"maybe\" is not a boolean",
                "expected 1 or true",
            ],
            run: || {
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
        },
    ]
}
