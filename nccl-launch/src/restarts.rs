//! A whole launch the torchrun way: fail fast, then restart every rank
//! up to [`Launch::with_max_restarts`] times.

use std::ffi::{OsStr, OsString};

use crate::{Job, Launch, LaunchError, Outcome};

impl Launch {
    /// Runs every rank of `program` with `args` to the end, as the
    /// `nccl-launch` command does: the first rank to fail ends the others
    /// ([`WaitPolicy::FailFast`](crate::WaitPolicy::FailFast), unless [`Launch::with_wait_policy`] says
    /// otherwise); then, while restarts are left
    /// ([`Launch::with_max_restarts`]), every rank is started again with the
    /// next `TORCHELASTIC_RESTART_COUNT`.
    ///
    /// `started` sees each attempt's [`Job`] once its ranks run (to say where
    /// they are). The outcome is the last attempt's ([`Outcome::restarts`] says
    /// which), its `elapsed` the whole launch's; what the launcher does is said
    /// on its standard error, prefixed `nccl-launch:`.
    ///
    /// # Errors
    /// As [`Launch::spawn`], for the first attempt or a restart (the
    /// ranks of that attempt already started are ended).
    pub fn run<I, S>(
        &self,
        program: impl AsRef<OsStr>,
        args: I,
        mut started: impl FnMut(&Job),
    ) -> Result<Outcome, LaunchError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let program = program.as_ref();
        let args: Vec<OsString> = args.into_iter().map(|a| a.as_ref().to_owned()).collect();
        let ranks: Vec<usize> = (0..self.world_size).collect();
        let start = self.clock.now();
        let mut attempt = self.first_attempt()?;
        loop {
            let job = self.start_attempt(program, &args, &ranks, &attempt)?;
            started(&job);
            let mut outcome = job.wait(self.wait_policy);
            let failed = outcome
                .first_failure
                .filter(|_| outcome.signal.is_none() && !outcome.timed_out);
            if let Some(rank) = failed
                && attempt.restart_count < self.max_restarts
            {
                attempt.restart_count += 1;
                eprintln!(
                    "nccl-launch: rank {rank} failed; restart {} of {}: starting every rank again \
                     (TORCHELASTIC_RESTART_COUNT={})",
                    attempt.restart_count, self.max_restarts, attempt.restart_count
                );
                continue;
            }
            if let Some(rank) = failed
                && self.max_restarts > 0
            {
                eprintln!(
                    "nccl-launch: rank {rank} failed and the {} restart(s) allowed are spent; \
                     giving up",
                    self.max_restarts
                );
            }
            outcome.elapsed = self.clock.now().saturating_sub(start);
            return Ok(outcome);
        }
    }
}
