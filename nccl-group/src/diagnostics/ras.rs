//! NCCL's RAS service asked for its view of the job: which ranks of
//! which communicators did not answer it, and which processes it
//! considers dead. A failed group puts the answer in its report
//! ([`FailureDetails::ras`](crate::FailureDetails::ras)) and its dump
//! ([`GroupOptions::ras_report`](crate::GroupOptions::ras_report)); [`query`] asks
//! at any time.
//!
//! RAS (NCCL 2.24 and later, on unless `NCCL_RAS_ENABLE=0`) runs a thread
//! in every NCCL process, started with its first communicator, that
//! listens for clients at `NCCL_RAS_ADDR` (default `localhost:28028`).
//! The client protocol is lines of text over TCP, as NCCL's own `ncclras`
//! speaks it (`src/ras/client.cc` and `client_support.cc` of NVIDIA/nccl):
//!
//! ```text
//! -> CLIENT PROTOCOL 2        <- SERVER PROTOCOL 2
//! -> TIMEOUT 1                <- OK      (how long RAS waits for each process it asks)
//! -> SET FORMAT json          <- OK      (2.28.7 and later; before: ERROR: Unknown command ...)
//! -> STATUS                   <- the report, then RAS closes the connection
//! ```
//!
//! The JSON report lists each communicator's `missing_ranks` (`rank`,
//! `host`, `pid`, `status.unresponsive`, `status.considered_dead`); the
//! text report (before 2.28.7) has them in its `Errors` and `Warnings`
//! sections, which the one-line summary quotes.
//!
//! A JSON report that does not parse (NCCL 2.28.9's never did, on an
//! H200) is asked for again as text, which gives the text report's
//! findings instead of no view at all.
//!
//! Every step is bounded ([`RasLimits`]): a closed port, a silent server
//! or a slow answer gives [`RasReport::Unavailable`] with one line saying
//! why. Several NCCL processes on one host all listen on the same port
//! (NCCL sets `SO_REUSEPORT`), and the kernel hands a connection to any of
//! them, a stopped one included: give each process its own
//! `NCCL_RAS_ADDR` (simulated hosts on one machine need this).

use std::fmt;
use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Where RAS listens unless `NCCL_RAS_ADDR` says otherwise.
pub const DEFAULT_ADDRESS: &str = "localhost:28028";

/// The variable that moves RAS's client socket (`host:port`), read by
/// NCCL and by [`query_from_env`].
pub const ADDRESS_VARIABLE: &str = "NCCL_RAS_ADDR";

/// The variable that turns RAS off (`0`).
pub const ENABLE_VARIABLE: &str = "NCCL_RAS_ENABLE";

/// The client protocol version this client speaks (NCCL's
/// `NCCL_RAS_CLIENT_PROTOCOL`, 2 since 2.24).
pub const CLIENT_PROTOCOL: u32 = 2;

/// How long a RAS query may take.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct RasLimits {
    /// Connecting, and each answer of the handshake.
    ///
    /// Default 300 ms.
    pub connect: Duration,
    /// The status report, from the request to its end.
    ///
    /// Default 2.5 s: RAS asks every process of the job, waiting
    /// [`RasLimits::gather`] for each that does not answer.
    pub answer: Duration,
    /// How long RAS waits for each process it asks (its `TIMEOUT`, whole
    /// seconds, at least 1).
    ///
    /// Default 1 s.
    pub gather: Duration,
    /// The most bytes of the report kept.
    ///
    /// Default 1 MiB.
    pub max_bytes: usize,
}

impl RasLimits {
    /// The longest a query can take: twice (a JSON report that does not
    /// parse is asked for again as text) the connection and the
    /// handshake's three answers (`connect` each), then the report
    /// (`answer`).
    #[cfg(feature = "cuda")]
    pub(crate) fn bound(&self) -> Duration {
        self.connect
            .saturating_mul(4)
            .saturating_add(self.answer)
            .saturating_mul(2)
    }

    /// With this bound on connecting and on each answer of the handshake.
    pub fn with_connect(mut self, bound: Duration) -> Self {
        self.connect = bound;
        self
    }

    /// With this bound on the status report.
    pub fn with_answer(mut self, bound: Duration) -> Self {
        self.answer = bound;
        self
    }
}

impl Default for RasLimits {
    fn default() -> Self {
        Self {
            connect: Duration::from_millis(300),
            answer: Duration::from_millis(2500),
            gather: Duration::from_secs(1),
            max_bytes: 1 << 20,
        }
    }
}

/// A rank that RAS could not reach in one of its communicators.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct RasRank {
    /// The communicator's hash, as NCCL's debug output prints it.
    pub communicator: String,
    /// The rank in that communicator.
    pub rank: i64,
    /// Its host, as RAS knows it.
    pub host: String,
    /// Its process id.
    pub pid: i64,
    /// RAS could not reach it.
    pub unresponsive: bool,
    /// RAS gave up on it: unreachable for a minute.
    pub dead: bool,
}

/// NCCL's RAS view of the job, or why there is none.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "format", rename_all = "snake_case")]
#[non_exhaustive]
pub enum RasReport {
    /// The JSON report (NCCL 2.28.7 and later).
    Json {
        /// Where RAS answered.
        address: String,
        /// How many communicators it reported.
        communicators: usize,
        /// The ranks it could not reach.
        missing: Vec<RasRank>,
        /// The whole report.
        report: Value,
    },
    /// The text report (NCCL 2.24 to 2.28.6).
    Text {
        /// Where RAS answered.
        address: String,
        /// The report.
        report: String,
        /// Whether it ended (else it was cut at [`RasLimits::answer`] or
        /// [`RasLimits::max_bytes`]).
        complete: bool,
    },
    /// No report: why, in one line.
    Unavailable {
        /// Why.
        reason: String,
    },
}

impl RasReport {
    pub(crate) fn unavailable(reason: impl Into<String>) -> Self {
        RasReport::Unavailable {
            reason: reason.into(),
        }
    }
}

/// The lines of a text report's `Errors` and `Warnings` sections, trimmed,
/// without the headings.
fn findings(report: &str) -> Vec<&str> {
    let Some(errors) = report.find("\nErrors\n") else {
        return Vec::new();
    };
    report[errors..]
        .lines()
        .map(str::trim)
        .filter(|line| {
            !line.is_empty()
                && !matches!(*line, "Errors" | "Warnings")
                && !line.chars().all(|c| c == '=')
        })
        .collect()
}

/// How many lines of a text report's findings the one-line summary quotes.
const QUOTED_LINES: usize = 12;

/// One line: `NCCL RAS at localhost:28028: communicator 0x...: rank 1
/// (process 12 on 10.0.0.2) unresponsive`, `NCCL RAS at ...: every rank
/// of 2 communicators answered`, or `RAS unavailable: ...`.
impl fmt::Display for RasReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RasReport::Json {
                address,
                communicators,
                missing,
                ..
            } => {
                write!(f, "NCCL RAS at {address}: ")?;
                if missing.is_empty() {
                    return write!(f, "every rank of {communicators} communicator(s) answered");
                }
                for (i, rank) in missing.iter().enumerate() {
                    let state = match (rank.dead, rank.unresponsive) {
                        (true, _) => "considered dead",
                        (false, true) => "unresponsive",
                        (false, false) => "missing",
                    };
                    write!(
                        f,
                        "{}communicator {}: rank {} (process {} on {}) {state}",
                        if i > 0 { "; " } else { "" },
                        rank.communicator,
                        rank.rank,
                        rank.pid,
                        rank.host
                    )?;
                }
                Ok(())
            }
            RasReport::Text {
                address,
                report,
                complete,
            } => {
                write!(f, "NCCL RAS at {address}: ")?;
                let lines = findings(report);
                match lines.is_empty() {
                    true if report.contains("\nErrors\n") => {
                        f.write_str("no errors or warnings")?
                    }
                    true => f.write_str("its report has no Errors section")?,
                    false => {
                        f.write_str(&lines[..lines.len().min(QUOTED_LINES)].join(" / "))?;
                        if lines.len() > QUOTED_LINES {
                            write!(f, " / ... ({} more lines)", lines.len() - QUOTED_LINES)?;
                        }
                    }
                }
                if !complete {
                    f.write_str(" (the report was cut short)")?;
                }
                Ok(())
            }
            RasReport::Unavailable { reason } => write!(f, "RAS unavailable: {reason}"),
        }
    }
}

/// Asks the RAS service the environment names.
///
/// [`ENABLE_VARIABLE`] `0` says RAS is off without asking;
/// [`ADDRESS_VARIABLE`], else [`DEFAULT_ADDRESS`], is where. (NCCL also
/// reads its variables from `/etc/nccl.conf` and `~/.nccl.conf`; set them in
/// the environment for this to see them.)
pub fn query_from_env(limits: &RasLimits) -> RasReport {
    query_with_vars(|name| std::env::var(name).ok(), limits)
}

/// [`query_from_env`] with the variables `vars` gives.
pub fn query_with_vars(vars: impl Fn(&str) -> Option<String>, limits: &RasLimits) -> RasReport {
    if vars(ENABLE_VARIABLE).is_some_and(|value| value.trim() == "0") {
        return RasReport::unavailable(format!("RAS is off ({ENABLE_VARIABLE}=0)"));
    }
    let address = vars(ADDRESS_VARIABLE).unwrap_or_else(|| DEFAULT_ADDRESS.to_string());
    query(&address, limits)
}

/// Asks the RAS service at `address` (`host:port`) for its report, within
/// `limits`: the JSON report where RAS has it, else (an older NCCL, or a
/// JSON report that does not parse) the text one.
pub fn query(address: &str, limits: &RasLimits) -> RasReport {
    match ask(address, limits, Format::Json) {
        Err(Refused::Unparsed(json_error)) => match ask(address, limits, Format::Text) {
            Ok(report) => report,
            Err(refused) => RasReport::unavailable(format!(
                "{json_error}; asked again as text: {}",
                refused.reason()
            )),
        },
        answer => answer.unwrap_or_else(|refused| RasReport::unavailable(refused.reason())),
    }
}

/// The report format a query asks for.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Format {
    /// `SET FORMAT json` (the text report where RAS does not know it).
    Json,
    /// RAS's default text report.
    Text,
}

/// Why a query gave no report.
enum Refused {
    /// A complete JSON report that did not parse.
    Unparsed(String),
    /// Anything else.
    Other(String),
}

impl Refused {
    fn reason(self) -> String {
        match self {
            Refused::Unparsed(reason) | Refused::Other(reason) => reason,
        }
    }
}

impl From<String> for Refused {
    fn from(reason: String) -> Self {
        Refused::Other(reason)
    }
}

/// A connection to RAS, with what was read past the last line.
struct Connection<'a> {
    stream: TcpStream,
    address: &'a str,
    pending: Vec<u8>,
}

impl Connection<'_> {
    /// Sends `command` and reads the one-line answer within `within`.
    fn ask(&mut self, command: &str, within: Duration) -> Result<String, String> {
        let sent = self
            .stream
            .set_write_timeout(Some(within))
            .and_then(|()| self.stream.write_all(format!("{command}\n").as_bytes()));
        if let Err(error) = sent {
            return Err(format!(
                "sending {command:?} to {} failed: {error}",
                self.address
            ));
        }
        let deadline = Instant::now() + within;
        loop {
            if let Some(end) = self.pending.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = self.pending.drain(..=end).collect();
                return Ok(String::from_utf8_lossy(&line).trim().to_string());
            }
            if self.pending.len() > 4096 {
                return Err(format!(
                    "{} answered {command:?} with an endless line",
                    self.address
                ));
            }
            match self.read(deadline) {
                Ok(0) => {
                    return Err(format!(
                        "{} closed the connection instead of answering {command:?}",
                        self.address
                    ));
                }
                Ok(_) => {}
                Err(Some(error)) => {
                    return Err(format!("reading from {} failed: {error}", self.address));
                }
                Err(None) => {
                    return Err(format!(
                        "{} accepted the connection but did not answer {command:?} within {within:?} (with \
                         several NCCL processes on one host sharing the port, it may have reached a stopped \
                         one: give each process its own {ADDRESS_VARIABLE})",
                        self.address
                    ));
                }
            }
        }
    }

    /// Reads into `pending` until `deadline`: the bytes read (0 at the end
    /// of the stream), or the error (`None`: the deadline passed).
    fn read(&mut self, deadline: Instant) -> Result<usize, Option<std::io::Error>> {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(None);
        }
        self.stream.set_read_timeout(Some(left)).map_err(Some)?;
        let mut chunk = [0u8; 8192];
        loop {
            match self.stream.read(&mut chunk) {
                Ok(n) => {
                    self.pending.extend_from_slice(&chunk[..n]);
                    return Ok(n);
                }
                Err(error) if error.kind() == std::io::ErrorKind::Interrupted => {}
                Err(error)
                    if matches!(
                        error.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) =>
                {
                    return Err(None);
                }
                Err(error) => return Err(Some(error)),
            }
        }
    }

    /// Reads the rest of the stream, at most `max_bytes`, until `deadline`:
    /// the bytes and whether the stream ended.
    fn rest(mut self, deadline: Instant, max_bytes: usize) -> (Vec<u8>, bool) {
        loop {
            if self.pending.len() >= max_bytes {
                self.pending.truncate(max_bytes);
                return (self.pending, false);
            }
            match self.read(deadline) {
                Ok(0) => return (self.pending, true),
                Ok(_) => {}
                Err(_) => return (self.pending, false),
            }
        }
    }
}

/// The protocol: handshake, gather timeout, format (asked for when
/// `format` is JSON), status.
fn ask(address: &str, limits: &RasLimits, format: Format) -> Result<RasReport, Refused> {
    let targets: Vec<_> = address
        .to_socket_addrs()
        .map_err(|error| format!("cannot resolve {address}: {error}"))?
        .collect();
    let mut refused = None;
    let stream = targets
        .iter()
        .find_map(|target| {
            TcpStream::connect_timeout(target, limits.connect)
                .map_err(|error| refused = Some(error))
                .ok()
        })
        .ok_or_else(|| {
            let why = refused.map_or_else(|| "no address".to_string(), |e| e.to_string());
            format!(
                "nothing answers at {address} ({why}): the NCCL process's RAS is off \
                 ({ENABLE_VARIABLE}=0), listens elsewhere ({ADDRESS_VARIABLE}), or has not started (it \
                 starts with the first communicator)"
            )
        })?;
    let mut connection = Connection {
        stream,
        address,
        pending: Vec::new(),
    };
    let hello = connection.ask(
        &format!("CLIENT PROTOCOL {CLIENT_PROTOCOL}"),
        limits.connect,
    )?;
    if !hello.to_ascii_uppercase().starts_with("SERVER PROTOCOL ") {
        return Err(format!(
            "{address} is not NCCL's RAS: it answered the handshake with {hello:?}"
        )
        .into());
    }
    let gather = limits.gather.as_secs().max(1);
    let timeout = connection.ask(&format!("TIMEOUT {gather}"), limits.connect)?;
    if !timeout.eq_ignore_ascii_case("OK") {
        return Err(format!("{address} refused \"TIMEOUT {gather}\": {timeout:?}").into());
    }
    let json = format == Format::Json && {
        let answer = connection.ask("SET FORMAT json", limits.connect)?;
        match answer.to_ascii_uppercase() {
            upper if upper == "OK" => true,
            upper if upper.starts_with("ERROR") => false,
            _ => {
                return Err(Refused::Other(format!(
                    "{address} answered \"SET FORMAT json\" with {answer:?}"
                )));
            }
        }
    };
    if let Err(error) = connection
        .stream
        .write_all(b"STATUS\n")
        .and_then(|()| connection.stream.flush())
    {
        return Err(Refused::Other(format!(
            "sending \"STATUS\" to {address} failed: {error}"
        )));
    }
    let (bytes, complete) = connection.rest(Instant::now() + limits.answer, limits.max_bytes);
    if !json {
        return Ok(RasReport::Text {
            address: address.to_string(),
            report: String::from_utf8_lossy(&bytes).into_owned(),
            complete,
        });
    }
    if !complete {
        return Err(Refused::Other(format!(
            "{address} had not finished its report after {:?} ({} bytes)",
            limits.answer,
            bytes.len()
        )));
    }
    let report: Value = serde_json::from_slice(&bytes).map_err(|error| {
        Refused::Unparsed(format!("{address}'s JSON report did not parse: {error}"))
    })?;
    Ok(json_report(address, report))
}

/// The missing ranks of a JSON report's communicators.
fn json_report(address: &str, report: Value) -> RasReport {
    let communicators = report["communicators"]
        .as_array()
        .map_or(&[][..], Vec::as_slice);
    let missing = communicators
        .iter()
        .flat_map(|comm| {
            let hash = comm["hash"].as_str().unwrap_or("?").to_string();
            let ranks = comm["missing_ranks"]
                .as_array()
                .map_or(&[][..], Vec::as_slice);
            ranks.iter().map(move |rank| RasRank {
                communicator: hash.clone(),
                rank: rank["rank"].as_i64().unwrap_or(-1),
                host: rank["host"].as_str().unwrap_or("?").to_string(),
                pid: rank["pid"].as_i64().unwrap_or(-1),
                unresponsive: rank["status"]["unresponsive"].as_bool().unwrap_or(false),
                dead: rank["status"]["considered_dead"].as_bool().unwrap_or(false),
            })
        })
        .collect();
    RasReport::Json {
        address: address.to_string(),
        communicators: communicators.len(),
        missing,
        report,
    }
}
