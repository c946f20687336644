//! The client of NCCL's RAS service (`nccl_group::ras`) against fake
//! servers speaking the protocol as NCCL's `src/ras/client_support.cc`
//! serves it: a JSON report (NCCL 2.28.7 and later), a text report (an
//! older NCCL that answers `SET FORMAT` with `ERROR: Unknown command`), a
//! closed port, a server that never answers, a report that never ends,
//! something that is not RAS, a JSON report that does not parse (asked for
//! again as text), and RAS turned off. Every outcome is a
//! report or one line saying why not; each query runs under a hang guard
//! (no timing is asserted).

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::thread;
use std::time::Duration;

use nccl_group::ras::{self, RasLimits, RasReport};
use nccl_test_support::within;

/// Hang guard: only a client that ignores its own bounds outlasts it.
const PATIENCE: Duration = Duration::from_secs(60);

/// A JSON report as NCCL 2.29 writes it: rank 1 of a communicator of 2 is
/// missing and unresponsive.
const JSON_REPORT: &str = r#"{
  "nccl_version": "2.29.1",
  "cuda_runtime_version": 13000,
  "cuda_driver_version": 13000,
  "timestamp": "2025-12-19 13:06:53",
  "communicators_count": 1,
  "communicators": [
    {
      "hash": "0xae94423cfbb2ef4a",
      "secondary_hash": "0xb7e7187447156001:0xb8242ed28a71381e",
      "size": 2,
      "ranks_count": 1,
      "missing_ranks_count": 1,
      "ranks": [
        {
          "rank": 0, "host": "172.16.64.245", "pid": 1524344, "cuda_dev": 0, "nvml_dev": 0,
          "status": {"init_state": 0, "async_error": 0, "finalize_called": false,
                     "destroy_flag": false, "abort_flag": false},
          "collective_counts": {"AllReduce": 57}
        }
      ],
      "missing_ranks": [
        {
          "rank": 1, "host": "172.16.64.245", "pid": 1524345, "cuda_dev": 1, "nvml_dev": 1,
          "status": {"unresponsive": true, "considered_dead": false}
        }
      ]
    }
  ],
  "ras": {"collection_time_sec": 1.002, "timeouts_count": 1}
}
"#;

/// A text report as NCCL 2.24 to 2.28.6 writes it, with a stopped process.
const TEXT_REPORT: &str = "Job summary\n===========\n\n  Nodes  Processes         GPUs  Processes     GPUs\n\
(total)   per node  per process    (total)  (total)\n      1          2            1          2        2\n\n\
Communicators... (1.00s)\n=============\n\nGroup     Comms     Nodes     Ranks     Ranks     Ranks    Status  Errors\n\
    #  in group  per comm  per node  per comm  in group\n    0         1         1         2         2         2   \
RUNNING  INCOMPLETE\n\nErrors\n======\n\nINCOMPLETE\n  Missing communicator data from 1 job process\n  \
Process 3487984 on node 172.16.64.213 managing GPU 1\n\n#0-0 (cf264af53edbe986) INCOMPLETE\n  \
Missing communicator data from 1 rank\n  The missing rank: 1\n\nWarnings\n========\n\nTIMEOUT\n  \
Encountered 1 communication timeout while gathering communicator data\n\n";

/// How a fake server answers.
#[derive(Clone, Copy)]
enum Server {
    /// NCCL 2.28.7 and later: JSON.
    Json,
    /// An older NCCL: no `SET FORMAT`, a text report.
    Text,
    /// Answers the handshake, then sends part of the report and stalls.
    Stalls,
    /// Not RAS at all.
    Other,
    /// As NCCL 2.28.9 answered on an H200: a JSON report that does not
    /// parse, and the text report to a client that asks no format.
    BadJson,
}

/// Serves one client on a free port of 127.0.0.1; returns the address.
fn serve(server: Server) -> String {
    serve_clients(server, 1)
}

/// Serves `clients` clients, one after the other.
fn serve_clients(server: Server, clients: usize) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap().to_string();
    thread::spawn(move || {
        for _ in 0..clients {
            let (stream, _) = listener.accept().unwrap();
            answer(server, stream);
        }
    });
    address
}

/// One client's conversation, line by line, as `client_support.cc`
/// answers (commands are case-insensitive).
fn answer(server: Server, stream: TcpStream) {
    let mut out = stream.try_clone().unwrap();
    let mut json = false;
    for line in BufReader::new(stream).lines() {
        let Ok(line) = line else { return };
        let command = line.trim().to_ascii_lowercase();
        let reply = match (server, command.as_str()) {
            (Server::Other, _) => "HTTP/1.1 400 Bad Request\n".to_string(),
            (_, c) if c.starts_with("client protocol ") => "SERVER PROTOCOL 2\n".to_string(),
            (_, c) if c.starts_with("timeout ") => "OK\n".to_string(),
            (Server::Json | Server::Stalls | Server::BadJson, "set format json") => {
                json = true;
                "OK\n".to_string()
            }
            (_, c) if c.starts_with("set format ") => format!("ERROR: Unknown command {line}\n"),
            (Server::Json, "status") => {
                out.write_all(JSON_REPORT.as_bytes()).unwrap();
                return; // RAS closes the connection after the report
            }
            (Server::BadJson, "status") if json => {
                // The comma after the communicators' list left out.
                let bad = JSON_REPORT.replacen("  ],\n  \"ras\"", "  ]\n  \"ras\"", 1);
                assert_ne!(bad, JSON_REPORT);
                out.write_all(bad.as_bytes()).unwrap();
                return;
            }
            (Server::Text | Server::BadJson, "status") => {
                out.write_all(TEXT_REPORT.as_bytes()).unwrap();
                return;
            }
            (Server::Stalls, "status") => {
                out.write_all(&JSON_REPORT.as_bytes()[..100]).unwrap();
                thread::sleep(PATIENCE);
                return;
            }
            _ => format!("ERROR: Unknown command {line}\n"),
        };
        if out.write_all(reply.as_bytes()).is_err() {
            return;
        }
    }
}

fn query(address: String, limits: RasLimits) -> RasReport {
    within("a RAS query", PATIENCE, move || {
        ras::query(&address, &limits)
    })
}

#[test]
fn a_json_report_names_the_unresponsive_rank() {
    let address = serve(Server::Json);
    let report = query(address.clone(), RasLimits::default());
    let RasReport::Json {
        communicators,
        missing,
        report: whole,
        ..
    } = &report
    else {
        panic!("{report:?}");
    };
    assert_eq!(*communicators, 1);
    assert_eq!(missing.len(), 1);
    let rank = &missing[0];
    assert_eq!(
        (rank.rank, rank.pid, rank.unresponsive, rank.dead),
        (1, 1524345, true, false)
    );
    assert_eq!(rank.communicator, "0xae94423cfbb2ef4a");
    assert_eq!(whole["ras"]["timeouts_count"], 1);
    assert_eq!(
        report.to_string(),
        format!(
            "NCCL RAS at {address}: communicator 0xae94423cfbb2ef4a: rank 1 (process 1524345 on \
             172.16.64.245) unresponsive"
        )
    );
    // In a dump: the format, the missing ranks and the whole report.
    let json = serde_json::to_value(&report).unwrap();
    assert_eq!(json["format"], "json");
    assert_eq!(json["missing"][0]["rank"], 1);
    assert_eq!(json["report"]["communicators_count"], 1);
}

#[test]
fn an_older_nccl_answers_in_text_whose_findings_are_quoted() {
    let address = serve(Server::Text);
    let report = query(address.clone(), RasLimits::default());
    assert!(
        matches!(&report, RasReport::Text { complete: true, report, .. } if report == TEXT_REPORT),
        "{report:?}"
    );
    assert_eq!(
        report.to_string(),
        format!(
            "NCCL RAS at {address}: INCOMPLETE / Missing communicator data from 1 job process / Process \
             3487984 on node 172.16.64.213 managing GPU 1 / #0-0 (cf264af53edbe986) INCOMPLETE / Missing \
             communicator data from 1 rank / The missing rank: 1 / TIMEOUT / Encountered 1 communication \
             timeout while gathering communicator data"
        )
    );
    assert_eq!(serde_json::to_value(&report).unwrap()["format"], "text");
}

#[test]
fn a_json_report_that_does_not_parse_is_asked_for_again_as_text() {
    let address = serve_clients(Server::BadJson, 2);
    let report = query(address.clone(), RasLimits::default());
    assert!(
        matches!(&report, RasReport::Text { complete: true, report, .. } if report == TEXT_REPORT),
        "{report:?}"
    );
    assert!(
        report
            .to_string()
            .starts_with(&format!("NCCL RAS at {address}: INCOMPLETE / ")),
        "{report}"
    );
    // A server that gives no second answer: both reasons, on one line.
    let once = serve_clients(Server::BadJson, 1);
    let limits = RasLimits::default().with_connect(Duration::from_millis(200));
    let text = query(once.clone(), limits).to_string();
    assert!(
        text.starts_with(&format!(
            "RAS unavailable: {once}'s JSON report did not parse: "
        )) && text.contains("; asked again as text: "),
        "{text}"
    );
    assert!(!text.contains('\n'), "one line: {text}");
}

#[test]
fn no_report_is_one_line_saying_why() {
    let mut lines = Vec::new();
    // A closed port.
    let closed = {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().to_string()
    };
    let report = query(closed.clone(), RasLimits::default());
    let text = report.to_string();
    assert!(
        text.starts_with(&format!("RAS unavailable: nothing answers at {closed} (")),
        "{text}"
    );
    assert!(
        text.contains("NCCL_RAS_ENABLE=0") && text.contains("NCCL_RAS_ADDR"),
        "{text}"
    );
    lines.push(text);
    // A server that accepts (the kernel does, into its backlog) and never
    // answers: a stopped process sharing the port.
    let silent = TcpListener::bind("127.0.0.1:0").unwrap();
    let address = silent.local_addr().unwrap().to_string();
    let limits = RasLimits::default().with_connect(Duration::from_millis(200));
    let text = query(address.clone(), limits).to_string();
    assert!(
        text.starts_with(&format!(
            "RAS unavailable: {address} accepted the connection but did not answer \"CLIENT PROTOCOL 2\" \
             within 200ms"
        )),
        "{text}"
    );
    assert!(text.contains("its own NCCL_RAS_ADDR"), "{text}");
    lines.push(text);
    drop(silent);
    // A report that never ends.
    let address = serve(Server::Stalls);
    let limits = RasLimits::default().with_answer(Duration::from_millis(200));
    let text = query(address.clone(), limits).to_string();
    assert!(
        text.starts_with(&format!(
            "RAS unavailable: {address} had not finished its report after 200ms (100 bytes)"
        )),
        "{text}"
    );
    lines.push(text);
    // Not RAS.
    let address = serve(Server::Other);
    let text = query(address.clone(), RasLimits::default()).to_string();
    assert_eq!(
        text,
        format!(
            "RAS unavailable: {address} is not NCCL's RAS: it answered the handshake with \
             \"HTTP/1.1 400 Bad Request\""
        )
    );
    lines.push(text);
    for text in lines {
        assert!(!text.contains('\n'), "one line: {text}");
    }
}

#[test]
fn the_environment_says_where_and_whether() {
    let off = ras::query_with_vars(
        |name| (name == ras::ENABLE_VARIABLE).then(|| "0".to_string()),
        &RasLimits::default(),
    );
    assert_eq!(
        off.to_string(),
        "RAS unavailable: RAS is off (NCCL_RAS_ENABLE=0)"
    );
    let address = serve(Server::Json);
    let elsewhere = address.clone();
    let report = within("a RAS query", PATIENCE, move || {
        ras::query_with_vars(
            |name| (name == ras::ADDRESS_VARIABLE).then(|| elsewhere.clone()),
            &RasLimits::default(),
        )
    });
    assert!(matches!(report, RasReport::Json { .. }), "{report:?}");
    assert_eq!(ras::DEFAULT_ADDRESS, "localhost:28028");
}
