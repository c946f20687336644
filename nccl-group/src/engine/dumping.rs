//! The group's flight-recorder dumps: the snapshot with its context, the
//! failure's dump, dumps on request (the API and the file trigger), each
//! an incident of [`crate::dumps`].

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use crate::diagnostics::dumps::{self, DumpError, DumpFiles, FAILURE_LABEL};
use crate::engine::memory::{self, DeviceMemStats};
use crate::diagnostics::recorder::records::FlightDump;
use crate::engine::failing::Findings;
use crate::engine::group::{Inner, ProcessGroup};
use crate::error::Result;

impl Inner {
    /// The flight recorder's records with this process's context (and,
    /// after a failure, what was learnt from the other ranks and RAS).
    pub(crate) fn dump(&self, reason: String, findings: Findings) -> FlightDump {
        let m = self.cache.membership();
        let (ops, total_recorded) = self.recorder.snapshot();
        let (last_enqueued, last_completed) = self.recorder.progress();
        FlightDump {
            group: m.name.clone(),
            generation: m.generation,
            rank: m.rank,
            world_size: m.world_size,
            reason,
            epoch_unix_us: self.recorder.epoch_unix_us(),
            dumped_us: self.recorder.micros(Instant::now()),
            pid: std::process::id(),
            nccl_version: nccl_core::version().ok().map(|v| v.to_string()),
            last_enqueued,
            last_completed,
            peers: findings.peers,
            lagging: findings.lagging,
            divergence: findings.divergence,
            ras: findings.ras,
            total_recorded,
            threads: FlightDump::thread_names(&ops),
            ops,
        }
    }

    /// Writes the failure's `dump` as the incident [`FAILURE_LABEL`]
    /// under `dir`; returns the JSON file (the failure's report names it).
    pub(crate) fn write_dump(
        &self,
        dir: &Path,
        dump: &FlightDump,
    ) -> std::result::Result<PathBuf, String> {
        dumps::write_incident(dir, FAILURE_LABEL, dump)
            .map(|files| files.json)
            .map_err(|error| nccl_core::ErrorChain(&error).to_string())
    }

    /// Serves a request of the file trigger (the watchdog calls this each
    /// interval; it looks at the file once a second): the dump is written
    /// on a thread of its own, so the watchdog never waits on a file
    /// system.
    pub(crate) fn serve_dump_request(self: &Arc<Self>, now: Instant) {
        let Some(label) = self.requests.poll(now) else {
            return;
        };
        let Some(dir) = self.cache.factory().options.dump_dir.clone() else {
            return;
        };
        let inner = Arc::clone(self);
        let write = move || {
            let reason = format!("requested through {}: {label:?}", dumps::REQUEST_FILE);
            let dump = inner.dump(reason, Findings::default());
            // The marker file (or its absence) is the outcome a script sees.
            let _written = dumps::write_incident(&dir, &label, &dump);
            crate::diagnostics::trace::event!(info, written = ?_written, "flight recorder dumped on request");
        };
        let spawned = std::thread::Builder::new()
            .name("nccl-group-dump".to_string())
            .spawn(write.clone());
        if spawned.is_err() {
            write();
        }
    }
}

impl ProcessGroup {}

/// What a group can tell about its operations: the flight recorder's
/// records ([`flight_record`](Diagnostics::flight_record),
/// [`dump_flight_recorder`](Diagnostics::dump_flight_recorder)) and the
/// operations the watchdog still waits for
/// ([`pending_operations`](Diagnostics::pending_operations)) and the GPU
/// memory its communicators hold ([`mem_stats`](Diagnostics::mem_stats)).
///
/// Sealed, implemented for [`ProcessGroup`] only, and in the
/// [`prelude`](crate::prelude).
pub trait Diagnostics: crate::sealed::Sealed {
    /// The flight recorder's records now, with this process's progress.
    fn flight_record(&self) -> FlightDump;

    /// Writes the flight recorder now, as the incident `label` in
    /// [`GroupOptions::dump_dir`](crate::GroupOptions::dump_dir)
    /// (`<dump dir>/<group>-g<generation>-<label>/`, see
    /// [`crate::dumps`]), and returns the files once they are complete.
    ///
    /// Every rank that dumps with the same label writes into the same folder,
    /// which torchfrtrace and [`crate::analysis`] read; nothing is overwritten
    /// (the same label twice takes a folder `<name>.1`). Works on a failed or
    /// aborted group too. From outside the process, the file
    /// [`dumps::REQUEST_FILE`] asks every group for the same.
    ///
    /// # Errors
    /// [`GroupError::Dump`](crate::GroupError::Dump): no dump folder
    /// ([`DumpError::NoFolder`]), or a file that could not be written.
    fn dump_flight_recorder(&self, label: &str) -> Result<DumpFiles>;

    /// How many operations the watchdog is still waiting for.
    fn pending_operations(&self) -> usize;

    /// The GPU memory the group's communicators hold
    /// (`ncclCommMemStats`, NCCL 2.29.7), summed per local device,
    /// ordered by device: the collective communicators and the send/recv
    /// pairs' made so far (none before the first operation).
    ///
    /// Answers while [`suspend`](crate::Lifecycle::suspend)ed too.
    ///
    /// # Errors
    /// NCCL's [`Unsupported`](nccl_core::Error::Unsupported) naming
    /// 2.29.7 on an older libnccl; a communicator NCCL no longer holds
    /// (an aborted or failed group's); NCCL's failure
    /// (`ncclInvalidUsage` while its memory manager is disabled).
    fn mem_stats(&self) -> Result<Vec<DeviceMemStats>>;
}

impl Diagnostics for ProcessGroup {
    fn flight_record(&self) -> FlightDump {
        self.inner
            .dump("on request".to_string(), Findings::default())
    }

    fn dump_flight_recorder(&self, label: &str) -> Result<DumpFiles> {
        let dir = self
            .options()
            .dump_dir
            .as_deref()
            .ok_or(DumpError::NoFolder)?;
        let dump = self
            .inner
            .dump(format!("on request: {label:?}"), Findings::default());
        Ok(dumps::write_incident(dir, label, &dump)?)
    }

    fn pending_operations(&self) -> usize {
        self.inner.tracker.len()
    }

    fn mem_stats(&self) -> Result<Vec<DeviceMemStats>> {
        memory::per_device(&self.inner.cache.all())
    }
}
