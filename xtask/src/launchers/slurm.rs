//! A Slurm cluster of this host alone, for the launcher checks: munged
//! with a fresh key, slurmctld, and two slurmd (`-N ci1`, `-N ci2`), each
//! a node of its own on a port of its own (Slurm's multiple-slurmd mode,
//! which Debian's build has), all in the foreground as children of this
//! process, configured by a generated slurm.conf in a temporary folder
//! (`SLURM_CONF`; nothing is written outside it, the machine's own munge
//! and Slurm setup are left alone). Ports are picked free, and the first
//! job id at random, so that two runs on one machine keep apart (the store
//! port srun's ranks derive is `15000 + job id % 10000`).
//!
//! Dropping the [`Cluster`] cancels its jobs and stops the daemons:
//! SIGTERM, then SIGKILL after [`STOP_WAIT`].

use std::ffi::OsString;
use std::io::Read;
use std::net::TcpListener;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use rustix::process::{Pid, Signal, kill_process};
use tempfile::TempDir;

use crate::{Result, on_path};

/// The programs the cluster and the checks run.
const PROGRAMS: [&str; 10] = [
    "munged",
    "munge",
    "slurmctld",
    "slurmd",
    "srun",
    "sbatch",
    "sinfo",
    "squeue",
    "scontrol",
    "scancel",
];

/// The node names, one slurmd each.
const NODES: [&str; 2] = ["ci1", "ci2"];

/// How long each daemon gets to come up.
const START_WAIT: Duration = Duration::from_secs(30);
/// How long a daemon gets to stop after SIGTERM, and the jobs to end after
/// scancel.
const STOP_WAIT: Duration = Duration::from_secs(10);
const POLL: Duration = Duration::from_millis(200);

/// Why no cluster can be started here, if so.
pub fn unavailable() -> Option<String> {
    let missing: Vec<&str> = PROGRAMS
        .into_iter()
        .filter(|program| on_path(program).is_none())
        .collect();
    if !missing.is_empty() {
        return Some(format!(
            "Slurm is not installed ({} not on PATH; Debian: apt-get install slurm-wlm munge; \
             .ci/run installs them as root)",
            missing.join(", ")
        ));
    }
    match std::fs::metadata("/proc/self").map(|m| m.uid()) {
        Ok(0) => None,
        Ok(uid) => Some(format!(
            "slurmd starts its tasks as root, and this runs as uid {uid}"
        )),
        Err(e) => Some(format!(
            "could not read this process's uid from /proc/self: {e}"
        )),
    }
}

/// A daemon this process started, in the foreground.
struct Daemon {
    /// How the logs name it: `munged`, `slurmctld`, `slurmd-ci1`.
    label: String,
    child: Child,
}

/// The running cluster; stopped when dropped.
pub struct Cluster {
    dir: TempDir,
    /// `dir`/slurm.conf.
    conf: PathBuf,
    daemons: Vec<Daemon>,
    /// Why the second node is not up, if it is not.
    second_node_missing: Option<String>,
}

impl Cluster {
    /// Starts munged, slurmctld and a slurmd per node, each waited for (at
    /// most [`START_WAIT`]). A second node that does not come up is no
    /// error: [`Cluster::second_node_missing`] says why.
    pub fn start() -> Result<Self> {
        let dir = tempfile::Builder::new()
            .prefix("nccl-rs-slurm.")
            .tempdir()
            .map_err(|e| format!("could not make a temporary folder: {e}"))?;
        // munged refuses a socket in a folder others cannot enter.
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755))?;
        let folder = dir.path().to_path_buf();
        let path = |name: &str| folder.join(name);
        let conf = path("slurm.conf");
        let mut cluster = Cluster {
            dir,
            conf: conf.clone(),
            daemons: Vec::new(),
            second_node_missing: None,
        };

        let key = path("munge.key");
        std::fs::write(&key, random_bytes(1024)?)?;
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600))?;
        let socket = path("munge.sock");
        let mut munged = vec![
            OsString::from("-F"),
            "--socket".into(),
            socket.clone().into(),
        ];
        for (flag, file) in [
            ("--key-file", "munge.key"),
            ("--log-file", "munged.log"),
            ("--pid-file", "munged.pid"),
            ("--seed-file", "munged.seed"),
        ] {
            munged.extend([flag.into(), path(file).into()]);
        }
        cluster.spawn("munged", "munged", &munged)?;
        cluster.wait_for("munged to take credentials", || {
            Command::new("munge")
                .args(["-n", "-S"])
                .arg(&socket)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        })?;

        std::fs::write(&conf, slurm_conf(&folder, &host_name()?, random_job_id()?)?)?;
        cluster.spawn("slurmctld", "slurmctld", &[OsString::from("-D")])?;
        cluster.wait_for("slurmctld to answer scontrol ping", || {
            query(&conf, &["scontrol", "ping"]).is_some_and(|out| out.contains("is UP"))
        })?;
        // One node after the other, so that a second slurmd that cannot
        // run costs the first nothing.
        let [first, second] = NODES;
        cluster.spawn_node(first)?;
        cluster.wait_for(&format!("node {first} to be idle"), || {
            node_idle(&conf, first)
        })?;
        cluster.spawn_node(second)?;
        if let Err(error) = cluster.wait_for(&format!("node {second} to be idle"), || {
            node_idle(&conf, second)
        }) {
            cluster.second_node_missing = Some(format!(
                "a second slurmd on this host did not come up as node {second} \
                 (multiple-slurmd mode), so srun has one node: {error}; its log ends:{}",
                tail(&path(&format!("slurmd-{second}.log")), 5)
            ));
        }
        let nodes = match cluster.second_node_missing {
            None => format!("{first} and {second}"),
            Some(_) => first.to_owned(),
        };
        println!(
            "==> a Slurm cluster in {}: slurmctld and node(s) {nodes}",
            cluster.dir.path().display()
        );
        Ok(cluster)
    }

    /// The folder of its configuration, logs and spool.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Why the second node is not up; `None` when it is.
    pub fn second_node_missing(&self) -> Option<&str> {
        self.second_node_missing.as_deref()
    }

    /// What srun, sbatch and the other clients need to reach this cluster.
    pub fn env(&self) -> Vec<(&'static str, OsString)> {
        vec![("SLURM_CONF", self.conf.clone().into())]
    }

    /// Prints the end of each daemon's log.
    pub fn print_logs(&self) {
        for daemon in &self.daemons {
            let log = self.dir.path().join(format!("{}.log", daemon.label));
            println!("==> the end of {}:{}", log.display(), tail(&log, 20));
        }
    }

    /// Starts `program` with `args`, its output in `label`.out in the
    /// cluster's folder.
    fn spawn(&mut self, program: &str, label: &str, args: &[OsString]) -> Result<()> {
        let out = std::fs::File::create(self.dir.path().join(format!("{label}.out")))?;
        let child = client(&self.conf, program)
            .args(args)
            .stdout(out.try_clone()?)
            .stderr(out)
            .spawn()
            .map_err(|e| format!("could not start {program}: {e}"))?;
        self.daemons.push(Daemon {
            label: label.to_owned(),
            child,
        });
        Ok(())
    }

    /// Starts the slurmd of `node`.
    fn spawn_node(&mut self, node: &str) -> Result<()> {
        let args = [OsString::from("-D"), "-N".into(), node.into()];
        self.spawn("slurmd", &format!("slurmd-{node}"), &args)
    }

    /// Polls `ready` until it holds, for at most [`START_WAIT`]; fails
    /// early when a daemon exited.
    fn wait_for(&mut self, what: &str, mut ready: impl FnMut() -> bool) -> Result<()> {
        let deadline = Instant::now() + START_WAIT;
        loop {
            if ready() {
                return Ok(());
            }
            for daemon in &mut self.daemons {
                if let Ok(Some(status)) = daemon.child.try_wait() {
                    let out = self.dir.path().join(format!("{}.out", daemon.label));
                    return Err(format!(
                        "{} exited ({status}) while waiting for {what}:{}",
                        daemon.label,
                        tail(&out, 5)
                    )
                    .into());
                }
            }
            if Instant::now() >= deadline {
                return Err(format!("waited {} s for {what}", START_WAIT.as_secs()).into());
            }
            thread::sleep(POLL);
        }
    }
}

impl Drop for Cluster {
    /// Cancels every job (a batch job outlives an sbatch that `timeout`
    /// stopped), then stops the daemons in the reverse order of their
    /// start.
    fn drop(&mut self) {
        if self.daemons.iter().any(|d| d.label == "slurmctld") {
            let _ = query(&self.conf, &["scancel", "--partition=ci"]);
            let deadline = Instant::now() + STOP_WAIT;
            while Instant::now() < deadline
                && query(&self.conf, &["squeue", "-h", "-o", "%i"])
                    .is_some_and(|jobs| !jobs.trim().is_empty())
            {
                thread::sleep(POLL);
            }
        }
        while let Some(mut daemon) = self.daemons.pop() {
            // One that exited was reaped already: its pid may be another's.
            if !matches!(daemon.child.try_wait(), Ok(None)) {
                continue;
            }
            let pid = Pid::from_child(&daemon.child);
            let _ = kill_process(pid, Signal::TERM);
            let deadline = Instant::now() + STOP_WAIT;
            while Instant::now() < deadline && matches!(daemon.child.try_wait(), Ok(None)) {
                thread::sleep(POLL);
            }
            if matches!(daemon.child.try_wait(), Ok(None)) {
                println!("==> {} did not stop on SIGTERM: killing it", daemon.label);
                let _ = daemon.child.kill();
                let _ = daemon.child.wait();
            }
        }
    }
}

/// `program` with the cluster's configuration `conf` and none of the
/// caller's Slurm variables (CI may itself run inside a Slurm job).
fn client(conf: &Path, program: &str) -> Command {
    let mut command = Command::new(program);
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("SLURM_") {
            command.env_remove(name);
        }
    }
    command.env("SLURM_CONF", conf).stdin(Stdio::null());
    command
}

/// The output of a client command (`words`) that succeeded.
fn query(conf: &Path, words: &[&str]) -> Option<String> {
    let (program, args) = words.split_first()?;
    let output = client(conf, program).args(args).output().ok()?;
    output
        .status
        .success()
        .then(|| String::from_utf8_lossy(&output.stdout).into_owned())
}

fn node_idle(conf: &Path, node: &str) -> bool {
    query(conf, &["sinfo", "-h", "-N", "-n", node, "-o", "%T"])
        .is_some_and(|state| state.trim() == "idle")
}

/// The slurm.conf of the cluster in `dir`: slurmctld on `host` (this
/// machine's name, which slurmctld checks) at 127.0.0.1, the nodes at
/// 127.0.0.1 each on its own port, 4 CPUs each whatever the machine has
/// (`config_overrides`), no cgroups (process tracking by /proc), no
/// accounting.
fn slurm_conf(dir: &Path, host: &str, first_job_id: u32) -> Result<String> {
    let controller = free_port()?;
    let mut nodes = String::new();
    for node in NODES {
        nodes.push_str(&format!(
            "NodeName={node} NodeHostname={host} NodeAddr=127.0.0.1 Port={} CPUs=4 State=UNKNOWN\n",
            free_port()?
        ));
    }
    let dir = dir.display();
    Ok(format!(
        "# Generated by cargo xtask launchers: a cluster of this host alone.
ClusterName=nccl-rs-ci
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={controller}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={dir}/munge.sock
StateSaveLocation={dir}
SlurmdSpoolDir={dir}/spool-%n
SlurmctldPidFile={dir}/slurmctld.pid
SlurmdPidFile={dir}/slurmd-%n.pid
SlurmctldLogFile={dir}/slurmctld.log
SlurmdLogFile={dir}/slurmd-%n.log
FirstJobId={first_job_id}
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
ReturnToService=2
KillWait=5
{nodes}PartitionName=ci Nodes=ALL Default=YES MaxTime=INFINITE State=UP
"
    ))
}

/// A TCP port free on this host a moment ago.
fn free_port() -> Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// This machine's short host name, as slurmctld and slurmd see it.
fn host_name() -> Result<String> {
    let name = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map_err(|e| format!("could not read /proc/sys/kernel/hostname: {e}"))?;
    let short = name.trim().split('.').next().unwrap_or_default();
    if short.is_empty() {
        return Err("this machine has an empty host name".into());
    }
    Ok(short.to_owned())
}

fn random_bytes(count: usize) -> Result<Vec<u8>> {
    let mut bytes = vec![0; count];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut random| random.read_exact(&mut bytes))
        .map_err(|e| format!("could not read /dev/urandom: {e}"))?;
    Ok(bytes)
}

/// A first job id in 1..=1_000_000.
fn random_job_id() -> Result<u32> {
    let bytes = random_bytes(4)?;
    Ok(1 + u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]) % 1_000_000)
}

/// The last `lines` lines of the file at `path`, indented.
fn tail(path: &Path, lines: usize) -> String {
    match std::fs::read_to_string(path) {
        Ok(text) => {
            let all: Vec<&str> = text.lines().collect();
            all[all.len().saturating_sub(lines)..]
                .iter()
                .map(|line| format!("\n    {line}"))
                .collect()
        }
        Err(e) => format!("(no {}: {e})", path.display()),
    }
}
