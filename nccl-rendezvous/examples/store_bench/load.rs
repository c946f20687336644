//! What the bench does to a server: hold idle connections, run clients
//! doing set/get/add, and attack it while probes measure other clients'
//! latency.

use std::io::Write;
use std::net::TcpStream;
use std::sync::Barrier;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use nccl_rendezvous::Store;

use crate::servers::{Sample, ServerProcess};

/// Latencies of one kind of operation.
#[derive(Debug, Default)]
pub struct Latencies(Vec<Duration>);

impl Latencies {
    pub fn extend(&mut self, other: Latencies) {
        self.0.extend(other.0);
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// The `q` quantile (0 to 1), nearest rank.
    pub fn quantile(&mut self, q: f64) -> Duration {
        if self.0.is_empty() {
            return Duration::ZERO;
        }
        self.0.sort_unstable();
        let rank = ((q * self.0.len() as f64).ceil() as usize).clamp(1, self.0.len());
        self.0[rank - 1]
    }
}

/// The server before and after opening `count` idle connections.
pub struct Idle {
    pub before: Sample,
    pub after: Sample,
    pub opened: usize,
    /// Why fewer than asked for were opened.
    pub stopped: Option<String>,
}

/// Opens `count` connections (one client each, as far as the server and
/// the descriptor limits let it), keeps them idle, samples the server,
/// checks one of them still works, and closes them all.
pub fn idle_connections(server: &ServerProcess, count: usize) -> Result<Idle, String> {
    const OPENERS: usize = 8;
    let before = server.sample();
    let (clients, stopped) = thread::scope(|s| {
        let openers: Vec<_> = (0..OPENERS)
            .map(|i| {
                let share = count / OPENERS + usize::from(i < count % OPENERS);
                s.spawn(move || {
                    let mut opened = Vec::with_capacity(share);
                    for _ in 0..share {
                        match server.client() {
                            Ok(client) => opened.push(client),
                            Err(e) => return (opened, Some(e)),
                        }
                    }
                    (opened, None)
                })
            })
            .collect();
        let mut all: Vec<Box<dyn Store>> = Vec::with_capacity(count);
        let mut stopped = None;
        for opener in openers {
            let (opened, error) = opener
                .join()
                .unwrap_or((Vec::new(), Some("an opener panicked".into())));
            all.extend(opened);
            stopped = stopped.or(error);
        }
        (all, stopped)
    });
    // Let the server settle (a thread-per-connection server starts threads
    // as it accepts).
    thread::sleep(Duration::from_millis(500));
    let after = server.sample();
    let last = clients.last().ok_or("no connection opened")?;
    last.set("idle/check", b"alive")
        .map_err(|e| e.to_string())?;
    Ok(Idle {
        before,
        after,
        opened: clients.len(),
        stopped,
    })
}

/// What `clients` threads doing `rounds` rounds of set, get and add saw.
pub struct Mixed {
    pub set: Latencies,
    pub get: Latencies,
    pub add: Latencies,
    pub wall: Duration,
}

/// `clients` threads, each with its own client, each doing `rounds` rounds
/// of a `set` of its own key, a `get` of it and an `add` to a shared
/// counter, all starting together.
pub fn mixed_clients(
    server: &ServerProcess,
    clients: usize,
    rounds: usize,
) -> Result<Mixed, String> {
    let stores: Vec<Box<dyn Store>> = (0..clients)
        .map(|_| server.client())
        .collect::<Result<_, _>>()?;
    let start = Barrier::new(clients + 1);
    let value = [0x5a_u8; 32];
    let (per_client, wall) = thread::scope(|s| {
        let handles: Vec<_> = stores
            .iter()
            .enumerate()
            .map(|(i, store)| {
                let (start, value) = (&start, &value);
                s.spawn(move || -> Result<[Latencies; 3], String> {
                    let key = format!("mixed/{i}");
                    let mut times: [Latencies; 3] = Default::default();
                    start.wait();
                    for _ in 0..rounds {
                        let t = Instant::now();
                        store.set(&key, value).map_err(|e| e.to_string())?;
                        times[0].0.push(t.elapsed());
                        let t = Instant::now();
                        store
                            .get(&key, Duration::from_secs(30))
                            .map_err(|e| e.to_string())?;
                        times[1].0.push(t.elapsed());
                        let t = Instant::now();
                        store.add("mixed/counter", 1).map_err(|e| e.to_string())?;
                        times[2].0.push(t.elapsed());
                    }
                    Ok(times)
                })
            })
            .collect();
        start.wait();
        let t = Instant::now();
        let results: Vec<_> = handles
            .into_iter()
            .map(|h| h.join().unwrap_or(Err("a client panicked".into())))
            .collect();
        (results, t.elapsed())
    });
    let mut mixed = Mixed {
        set: Latencies::default(),
        get: Latencies::default(),
        add: Latencies::default(),
        wall,
    };
    for times in per_client {
        let [set, get, add] = times?;
        mixed.set.extend(set);
        mixed.get.extend(get);
        mixed.add.extend(add);
    }
    Ok(mixed)
}

/// What the probes saw in one phase, and what it cost the server.
pub struct Phase {
    pub probes: Latencies,
    pub cpu: Duration,
    pub max_rss_kib: u64,
    pub max_threads: u64,
    /// Flood connections made in the phase.
    pub floods: u64,
}

/// The attacks of `tests/store_abuse/bounds.rs`, kept up for a whole
/// phase: unauthenticated connections that announce a 64 MiB frame and
/// send its first MiB, and a client asking to wait for 12 M keys every
/// 10 ms (refused by the client itself, from the limits the server
/// announced).
pub struct Attack {
    pub flooders: usize,
    pub wait_keys: usize,
    /// Flood connections a second, all flooders together; `None`: each
    /// reconnects as soon as it is done.
    pub rate: Option<f64>,
    /// The attacking threads' nice value (`None`: this process's).
    pub nice: Option<i32>,
    /// The attacking threads under `SCHED_IDLE` (over `nice`).
    pub idle: bool,
    /// The one CPU the attacking threads run on (`None`: any).
    pub cpu: Option<usize>,
}

/// Keeps the calling thread (and the threads and processes it starts
/// later) on the CPUs `keep` accepts, of the first 1024; a system that
/// refuses leaves it as it was, which the table then shows.
pub fn pin_thread(keep: impl Fn(usize) -> bool) {
    #[cfg(target_os = "linux")]
    {
        let mut set = rustix::thread::CpuSet::new();
        (0..rustix::thread::CpuSet::MAX_CPU)
            .filter(|&cpu| keep(cpu))
            .for_each(|cpu| set.set(cpu));
        if let Err(e) = rustix::thread::sched_setaffinity(None, &set) {
            eprintln!("store_bench: could not pin a thread: {e}");
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = keep;
}

/// Sets the calling thread's nice value (Linux threads have their own),
/// or puts it under `SCHED_IDLE`; a system that refuses leaves it as it
/// was, which the table then shows.
fn set_thread_nice(nice: Option<i32>, idle: bool) {
    #[cfg(target_os = "linux")]
    if idle {
        use thread_priority::unix::{
            NormalThreadSchedulePolicy, ThreadSchedulePolicy, set_thread_priority_and_policy,
            thread_native_id,
        };
        let policy = ThreadSchedulePolicy::Normal(NormalThreadSchedulePolicy::Idle);
        let min = thread_priority::ThreadPriority::Min;
        if let Err(e) = set_thread_priority_and_policy(thread_native_id(), min, policy) {
            eprintln!("store_bench: could not put an attacker under SCHED_IDLE: {e:?}");
        }
        return;
    }
    #[cfg(target_os = "linux")]
    if let Some(nice) = nice {
        let thread = Some(rustix::thread::gettid());
        if let Err(e) = rustix::process::setpriority_process(thread, nice) {
            eprintln!("store_bench: could not set an attacker's nice value to {nice}: {e}");
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (nice, idle);
}

const FLOOD_FRAME: u32 = 64 << 20;

/// Probes (clients doing a `set` and a `get` with a millisecond's pause)
/// for `length`, with `attack` running or not.
pub fn probe_phase(
    server: &ServerProcess,
    probes: usize,
    length: Duration,
    attack: Option<&Attack>,
) -> Result<Phase, String> {
    let stores: Vec<Box<dyn Store>> = (0..probes)
        .map(|_| server.client())
        .collect::<Result<_, _>>()?;
    let waiter = attack.map(|_| server.client()).transpose()?;
    let running = AtomicBool::new(true);
    let floods = AtomicU64::new(0);
    let body = vec![0x5a_u8; 1 << 20];
    let before = server.sample();
    let (latencies, max_rss_kib, max_threads) = thread::scope(|s| {
        if let Some(attack) = attack {
            let port = server.port;
            let every = attack
                .rate
                .map(|rate| Duration::from_secs_f64(attack.flooders as f64 / rate.max(1e-3)));
            for _ in 0..attack.flooders {
                let (running, floods, body) = (&running, &floods, &body);
                let (nice, idle, cpu) = (attack.nice, attack.idle, attack.cpu);
                s.spawn(move || {
                    set_thread_nice(nice, idle);
                    if let Some(cpu) = cpu {
                        pin_thread(|c| c == cpu);
                    }
                    let start = Instant::now();
                    for round in 0u32.. {
                        if !running.load(Ordering::Relaxed) {
                            break;
                        }
                        if let Some(every) = every {
                            let at = start + every * round;
                            thread::sleep(at.saturating_duration_since(Instant::now()));
                        }
                        let Ok(mut stream) = TcpStream::connect(("127.0.0.1", port)) else {
                            thread::sleep(Duration::from_millis(1));
                            continue;
                        };
                        let _ = stream.set_write_timeout(Some(Duration::from_secs(2)));
                        let _ = stream
                            .write_all(&FLOOD_FRAME.to_be_bytes())
                            .and_then(|()| stream.write_all(body));
                        floods.fetch_add(1, Ordering::Relaxed);
                    }
                });
            }
            if let Some(waiter) = &waiter {
                let keys = vec!["k"; attack.wait_keys];
                let (running, nice, idle, cpu) = (&running, attack.nice, attack.idle, attack.cpu);
                s.spawn(move || {
                    set_thread_nice(nice, idle);
                    if let Some(cpu) = cpu {
                        pin_thread(|c| c == cpu);
                    }
                    while running.load(Ordering::Relaxed) {
                        let _ = waiter.wait(&keys, Duration::from_secs(60));
                        thread::sleep(Duration::from_millis(10));
                    }
                });
            }
        }
        let probers: Vec<_> = stores
            .iter()
            .enumerate()
            .map(|(i, store)| {
                let running = &running;
                s.spawn(move || -> Result<Latencies, String> {
                    let key = format!("probe/{i}");
                    let mut times = Latencies::default();
                    let mut round = 0u64;
                    while running.load(Ordering::Relaxed) {
                        let t = Instant::now();
                        store
                            .set(&key, &round.to_be_bytes())
                            .map_err(|e| e.to_string())?;
                        let got = store
                            .get(&key, Duration::from_secs(30))
                            .map_err(|e| e.to_string())?;
                        times.0.push(t.elapsed());
                        if got != round.to_be_bytes() {
                            return Err(format!("probe {i} read {got:?} in round {round}"));
                        }
                        round += 1;
                        thread::sleep(Duration::from_millis(1));
                    }
                    Ok(times)
                })
            })
            .collect();
        let (mut max_rss_kib, mut max_threads) = (0, 0);
        let end = Instant::now() + length;
        while Instant::now() < end {
            let sample = server.sample();
            max_rss_kib = max_rss_kib.max(sample.rss_kib);
            max_threads = max_threads.max(sample.threads);
            thread::sleep(Duration::from_millis(50));
        }
        running.store(false, Ordering::Relaxed);
        let mut all = Latencies::default();
        let mut failed = None;
        for prober in probers {
            match prober.join().unwrap_or(Err("a probe panicked".into())) {
                Ok(times) => all.extend(times),
                Err(e) => failed = Some(e),
            }
        }
        (failed.map_or(Ok(all), Err), max_rss_kib, max_threads)
    });
    let probes = latencies?;
    if attack.is_some() && floods.load(Ordering::Relaxed) == 0 {
        return Err("the flood never connected".into());
    }
    Ok(Phase {
        probes,
        cpu: server.sample().cpu.saturating_sub(before.cpu),
        max_rss_kib,
        max_threads,
        floods: floods.load(Ordering::Relaxed),
    })
}
