//! A standalone TCP store server, for jobs where no rank should host it.
//!
//! ```text
//! NCCL_RS_STORE_SECRET=... cargo run -p nccl-rendezvous --example tcp_store_server -- 0.0.0.0:29500
//! ```
//!
//! Every rank, rank 0 included, then connects as a client with
//! `TcpStore::connect(host, port, options)` (with the same secret). Without
//! a secret the server takes clients of its own host only, unless
//! `NCCL_RS_STORE_ALLOW_UNAUTHENTICATED=1` (then anyone who reaches the
//! port can read and write every key). The server runs until the process
//! is stopped, or for `--for SECONDS`.

use std::time::{Duration, Instant};

use nccl_rendezvous::{TcpStoreServer, TcpStoreServerOptions};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let mut bind = "127.0.0.1:29500".to_owned();
    let mut run_for = None;
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--for" => {
                let secs: u64 = args
                    .next()
                    .ok_or("--for needs a number of seconds")?
                    .parse()?;
                run_for = Some(Duration::from_secs(secs));
            }
            "-h" | "--help" => {
                println!(
                    "usage: tcp_store_server [BIND_ADDR (default 127.0.0.1:29500)] [--for SECONDS]"
                );
                return Ok(());
            }
            other => bind = other.to_owned(),
        }
    }
    let mut options = TcpStoreServerOptions::default();
    if let Ok(secret) = std::env::var("NCCL_RS_STORE_SECRET") {
        options = options.with_secret(secret);
    }
    let open = std::env::var("NCCL_RS_STORE_ALLOW_UNAUTHENTICATED")
        .is_ok_and(|v| v.trim() == "1" || v.trim().eq_ignore_ascii_case("true"));
    options = options.with_unauthenticated_remote(open);
    let server = TcpStoreServer::bind(bind.as_str(), options)?;
    println!("TCP store server listening on {}", server.local_addr());
    let start = Instant::now();
    loop {
        std::thread::sleep(Duration::from_secs(1));
        if run_for.is_some_and(|d| start.elapsed() >= d) {
            break;
        }
    }
    server.shutdown();
    Ok(())
}
