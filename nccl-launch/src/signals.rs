//! Signals: the launcher's SIGTERM and SIGINT, noted by a handler and
//! forwarded to the ranks ([`crate::Launch::with_forward_signals`]), and each
//! rank's parent-death signal.

use std::io;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use rustix::process::Signal;

/// The signals a launch that forwards signals passes on to its ranks:
/// what Slurm and Kubernetes send to stop a job (SIGTERM), and a
/// terminal's Ctrl-C (SIGINT).
const FORWARDED_SIGNALS: [i32; 2] = [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT];

/// Where the handlers note the last forwarded signal that arrived and was
/// not yet taken (0: none); `None` until [`install`] has run.
static ARRIVED: Mutex<Option<Arc<AtomicUsize>>> = Mutex::new(None);

/// The signals that reached this process, as its handlers noted them.
#[derive(Clone, Debug)]
pub(crate) struct Arrivals(Arc<AtomicUsize>);

impl Arrivals {
    /// Installs the handlers of [`FORWARDED_SIGNALS`], once per process
    /// and for the rest of its life: from then on these signals no longer
    /// end the process, they are noted for the launch to forward.
    pub(crate) fn install() -> io::Result<Self> {
        let mut arrived = ARRIVED.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(flag) = &*arrived {
            return Ok(Arrivals(Arc::clone(flag)));
        }
        let flag = Arc::new(AtomicUsize::new(0));
        for signal in FORWARDED_SIGNALS {
            // Both are positive; the handler only stores the number.
            signal_hook::flag::register_usize(
                signal,
                Arc::clone(&flag),
                signal.unsigned_abs() as usize,
            )?;
        }
        *arrived = Some(Arc::clone(&flag));
        Ok(Arrivals(flag))
    }

    /// The signal that arrived since the last call, if any.
    pub(crate) fn take(&self) -> Option<Signal> {
        match self.0.swap(0, Ordering::SeqCst) {
            0 => None,
            raw => i32::try_from(raw).ok().and_then(Signal::from_named_raw),
        }
    }
}

/// A signal's name for messages (`SIGTERM`).
pub(crate) fn name(signal: Signal) -> String {
    match signal {
        Signal::TERM => "SIGTERM".to_string(),
        Signal::INT => "SIGINT".to_string(),
        Signal::KILL => "SIGKILL".to_string(),
        other => format!("signal {}", other.as_raw()),
    }
}

/// Makes the process `command` starts get SIGKILL when the thread that
/// starts it ends (Linux's parent-death signal, `PR_SET_PDEATHSIG`), so
/// no rank outlives a launcher that was killed.
///
/// A launcher that dies between the fork and the `prctl` would be missed: the
/// child then finds another parent and exits before running the program.
#[cfg(target_os = "linux")]
pub(crate) fn die_with_parent(command: &mut Command) {
    use std::os::unix::process::CommandExt;

    let parent = rustix::process::getpid();
    let hook = move || -> io::Result<()> {
        rustix::process::set_parent_process_death_signal(Some(Signal::KILL))?;
        if rustix::process::getppid() != Some(parent) {
            return Err(io::Error::from(rustix::io::Errno::SRCH));
        }
        Ok(())
    };
    // SAFETY: `pre_exec` runs `hook` in the child between fork and exec,
    // where only async-signal-safe work is sound (another thread of the
    // parent may have held a lock or been allocating at the fork). `hook`
    // makes two system calls, `prctl(PR_SET_PDEATHSIG)` and `getppid`,
    // through rustix, which neither allocates nor locks for them; its
    // error is an errno (`io::Error::from_raw_os_error`, no allocation);
    // it reads only `parent`, a pid copied into the closure.
    unsafe {
        command.pre_exec(hook);
    }
}

/// Other systems have no parent-death signal: ranks of a killed launcher
/// are not ended for it.
#[cfg(not(target_os = "linux"))]
pub(crate) fn die_with_parent(_command: &mut Command) {}
