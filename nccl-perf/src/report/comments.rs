//! The comment lines that describe a run: the preamble (program, library,
//! parameters, how it times, the notes on flags that cannot apply and on
//! `N/A` halves, the devices) and the lines that name each collective's
//! table before its column headers.

use nccl_group::CommMode;
use nccl_sys::Version;
use serde::{Deserialize, Serialize};

use super::table::{Columns, table_header};
use crate::buffers::Memory;
use crate::collective::{Collective, Mode};
use crate::env::Environment;
use crate::layer::{LayerKind, has_native_all_to_all, unsupported};
use crate::runner::Plan;

/// A rank's GPU as the table's preamble describes it (shared between the
/// processes of a launch through their store).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceInfo {
    /// The rank that drives it.
    pub rank: usize,
    /// The device ordinal in that rank's process.
    pub ordinal: usize,
    /// The marketing name (`NVIDIA H200`).
    pub name: String,
    /// The PCI address (`0000:04:00`).
    pub pci: String,
    /// The host of that rank's process.
    pub host: String,
    /// That process's id.
    pub pid: u32,
}

/// Where a run happens, as its comment lines describe it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Machine {
    /// The loaded libnccl's version.
    pub nccl_version: Version,
    /// Where that libnccl was loaded from.
    pub nccl_path: String,
    /// Whether that libnccl has `ncclAlltoAll`.
    pub native_all_to_all: bool,
    /// Every rank's GPU, in rank order.
    pub devices: Vec<DeviceInfo>,
}

impl Machine {
    /// This process's libnccl on `env`, with the ranks' `devices`.
    pub fn new(env: &Environment, devices: Vec<DeviceInfo>) -> Self {
        Self {
            nccl_version: env.library.version(),
            nccl_path: env.library.path().to_string(),
            native_all_to_all: has_native_all_to_all(env.library),
            devices,
        }
    }
}

/// The comment lines before the tables: program, library, parameters, devices.
pub fn preamble(plan: &Plan, machine: &Machine) -> Vec<String> {
    let (min, max) = (
        plan.sizes.first().copied().unwrap_or(0),
        plan.sizes.last().copied().unwrap_or(0),
    );
    let mut lines = vec![
        format!(
            "# nccl-perf {} (layer {}) nccl-library {} ({})",
            env!("CARGO_PKG_VERSION"),
            plan.layers_title(),
            machine.nccl_version,
            machine.nccl_path
        ),
        format!(
            "# nThread {} nGpus {} minBytes {min} maxBytes {max} step: {} warmup iters: {} iters: {} agg iters: {} validation: {} graph: {} unalign: {}",
            plan.threads,
            plan.gpus_per_thread,
            plan.method.step,
            plan.warmup,
            plan.iters,
            plan.method.agg_iters,
            plan.method.checks,
            plan.graph,
            plan.method.unalign
        ),
    ];
    lines.extend(plan.method.blocking.header_line().map(str::to_string));
    lines.extend(per_iter_line(plan));
    lines.extend(plan_notes(plan));
    lines.extend(["#".to_string(), "# Using devices".to_string()]);
    for device in &machine.devices {
        lines.push(format!(
            "#  Rank {:2} Group  0 Pid {:6} on {:>10} device {:2} [{}] {}",
            device.rank, device.pid, device.host, device.ordinal, device.pci, device.name
        ));
    }
    if plan.collectives.contains(&Collective::AllToAll) && !machine.native_all_to_all {
        lines.push(format!(
            "# note: libnccl {} has no ncclAlltoAll (NCCL 2.28+); all_to_all runs as grouped send/recv",
            machine.nccl_version
        ));
    }
    lines
}

/// nccl-tests' line for `-I 1` (with `--batches` above 1, how the batches'
/// iterations make one report).
fn per_iter_line(plan: &Plan) -> Option<String> {
    let skip = plan.method.per_iter?;
    let mut line =
        "# Per-Iteration Report: CUDA event timing; i_* uses max over process rows".to_string();
    if skip > 0 {
        line.push_str(&format!("; summary skips first {skip} iterations"));
    }
    if plan.batches > 1 {
        line.push_str(&format!(
            "; times_us holds the iterations of the {} batches in order, and the skip applies to each",
            plan.batches
        ));
    }
    line.push(' ');
    Some(line)
}

/// Comment lines that say how the plan times and what its columns mean.
fn plan_notes(plan: &Plan) -> Vec<String> {
    let batches = format!(
        "median of {} batch(es) per size, mode and layer",
        plan.batches
    );
    let calls = u64::from(plan.iters) * u64::from(plan.method.agg_iters);
    let rotation = if plan.method.rotate {
        "; each iteration at the next offset of buffers of -e bytes (nccl-tests' rotation)"
    } else {
        ""
    };
    let mut lines = vec![if plan.graph > 0 {
        format!(
            "# timing: {batches}; each batch replays a CUDA graph of {calls} captured call(s) {} times (time = batch / {}){rotation}",
            plan.graph,
            calls * u64::from(plan.graph)
        )
    } else {
        format!(
            "# timing: {batches}; -w warm-up calls of every size first, then per size and mode one waited call and batches of {calls} back-to-back call(s), then one stream synchronisation (nccl-tests' order){rotation}"
        )
    }];
    // cudarc's allocator, the default, goes unsaid: the preamble stays
    // that of the recorded runs.
    if plan.method.memory != Memory::Cudarc {
        lines.push(format!(
            "# buffers: {}{}",
            plan.method.memory.call(),
            if plan.method.register {
                ", registered with ncclCommRegister (-R 1)"
            } else {
                ""
            }
        ));
    }
    lines.extend(plan.method.notes.iter().cloned());
    if let Some((a, b)) = plan.compare() {
        lines.push(format!(
            "# compare: layers {a} and {b} interleaved on the same buffers (warm-up {a}, {b}, then batches {a}, {b}, {a}, ...); \
             the table is {b}'s; its 'ratio' column, last in each half, is time({b}) / time({a}) at the same size and mode \
             (< 1: {b} is faster); --json has both layers' rows",
            a = a.name(),
            b = b.name()
        ));
    }
    if plan.layers.iter().any(|kind| kind.stream_mode().is_some()) {
        lines.push(group_note(
            plan.group_options.comm_mode,
            plan.group_options.mismatch_check,
        ));
    }
    let mut noted = Vec::new();
    for &layer in &plan.layers {
        // The two group layers have the same operations: one note.
        let name = layer.stream_mode().map_or(layer.name(), |_| "group");
        if !noted.contains(&name) {
            noted.push(name);
            lines.extend(missing_notes(name, layer, &plan.collectives));
        }
    }
    if plan.graph > 0 {
        lines.push(
            "# note: cudarc's stream tracking is paused while capturing (each rank uses one stream)"
                .to_string(),
        );
    }
    lines
}

/// What the group layer's calls are.
fn group_note(comms: CommMode, mismatch_check: bool) -> String {
    let comms = match comms {
        CommMode::Blocking => "blocking",
        _ => "nonblocking",
    };
    let check = if mismatch_check { "on" } else { "off" };
    format!(
        "# note: the group layer's call is a ProcessGroup op + Work::wait on tensors of its own, \
         copied from and back to the buffers outside the timed batches; group-caller runs it on \
         the caller's stream (StreamMode::Caller), group on the group's NCCL stream; \
         {comms} communicators (--group-comms); mismatch check {check} (--group-mismatch-check)"
    )
}

/// Which halves of `collectives` the layer `layer` (called `name`) has no
/// form for (printed `N/A`), with why ([`unsupported`]).
fn missing_notes(name: &str, layer: LayerKind, collectives: &[Collective]) -> Vec<String> {
    let mut lines = Vec::new();
    for (mode, label) in [
        (Mode::OutOfPlace, "out-of-place"),
        (Mode::InPlace, "in-place"),
    ] {
        let (mut names, mut reasons) = (Vec::new(), Vec::new());
        for &collective in collectives {
            if let Some(why) = unsupported(layer, collective, mode) {
                names.push(collective.name());
                if !reasons.contains(&why) {
                    reasons.push(why);
                }
            }
        }
        if !names.is_empty() {
            lines.push(format!(
                "# note: the {name} layer has no {label} {} ({}): N/A",
                names.join(", "),
                reasons.join("; ")
            ));
        }
    }
    lines
}

/// What names a table: its collective, the layer of its rows (and the
/// baseline of `--compare`), the world size and, for a run, the machine.
pub struct TableTitle<'a> {
    /// The collective (`all_reduce`).
    pub collective: &'a str,
    /// The layer of the rows.
    pub layer: &'a str,
    /// A of `--compare A,B`.
    pub baseline: Option<&'a str>,
    /// The number of ranks.
    pub world: usize,
    /// Where the run was (its libnccl and GPUs); `None` for rows redrawn
    /// by `--report`, which do not say.
    pub machine: Option<&'a Machine>,
}

/// The comment lines naming a table ([`TableTitle`]), then its column
/// headers with `columns`.
pub fn table_heading(title: &TableTitle<'_>, columns: &Columns) -> Vec<String> {
    let baseline = title
        .baseline
        .map(|a| format!(" baseline {a}"))
        .unwrap_or_default();
    let (nccl, gpus) = match title.machine {
        Some(machine) => {
            let devices = &machine.devices;
            let mut names: Vec<&str> = devices.iter().map(|d| d.name.as_str()).collect();
            names.dedup();
            let gpus = if names.len() == 1 {
                format!("{} x {}", devices.len(), names[0])
            } else {
                devices
                    .iter()
                    .map(|d| d.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            (
                format!(" nccl {}", machine.nccl_version),
                format!(" gpus {gpus}"),
            )
        }
        None => (String::new(), String::new()),
    };
    let mut lines = vec![
        "#".to_string(),
        format!(
            "# Collective {} layer {}{baseline}{nccl} world {}{gpus}",
            title.collective, title.layer, title.world
        ),
        "#".to_string(),
    ];
    lines.extend(table_header(columns));
    lines
}

/// The comment lines naming one collective's table of `plan` on
/// `machine`, then its column headers.
pub fn collective_header(collective: Collective, plan: &Plan, machine: &Machine) -> Vec<String> {
    let title = TableTitle {
        collective: collective.name(),
        layer: plan.table_layer().name(),
        baseline: plan.compare().map(|(a, _)| a.name()),
        world: plan.world,
        machine: Some(machine),
    };
    table_heading(&title, &Columns::of(plan))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runner::{COMPARE_AND_GRAPH, plan_of};

    /// The H200 of the recorded runs in `docs/measurements/`, as `rank`.
    fn h200(rank: usize) -> DeviceInfo {
        DeviceInfo {
            rank,
            ordinal: rank,
            name: "NVIDIA H200".to_string(),
            pci: "0000:00:06".to_string(),
            host: "vm".to_string(),
            pid: 25051,
        }
    }

    fn machine(devices: Vec<DeviceInfo>) -> Machine {
        Machine {
            nccl_version: Version::new(2, 28, 3),
            nccl_path: "libnccl.so.2".to_string(),
            native_all_to_all: true,
            devices,
        }
    }

    #[test]
    fn preamble_and_header_match_a_recorded_run_byte_for_byte() {
        // The first lines of docs/measurements/h200-2026-12-02-tracking/tensor.txt,
        // `nccl-perf --compare raw,tensor -b 8 -e 128M -f 4 -w 10 -n 50` on one H200,
        // but for the N/A note, checked on its own below, and what was
        // added since: nccl-tests 2.19's `unalign: 0` and the rotation. The
        // run was nccl-perf 0.1.0's; the first line names the version built.
        let first = format!(
            "# nccl-perf {} (layer tensor vs raw) nccl-library 2.28.3 (libnccl.so.2)",
            env!("CARGO_PKG_VERSION")
        );
        let recorded = [
            first.as_str(),
            "# nThread 1 nGpus 1 minBytes 8 maxBytes 134217728 step: 4(factor) warmup iters: 10 iters: 50 agg iters: 1 validation: 1 graph: 0 unalign: 0",
            "# timing: median of 5 batch(es) per size, mode and layer; -w warm-up calls of every size first, then per size and mode one waited call and batches of 50 back-to-back call(s), then one stream synchronisation (nccl-tests' order); each iteration at the next offset of buffers of -e bytes (nccl-tests' rotation)",
            "# compare: layers raw and tensor interleaved on the same buffers (warm-up raw, tensor, then batches raw, tensor, raw, ...); the table is tensor's; its 'ratio' column, last in each half, is time(tensor) / time(raw) at the same size and mode (< 1: tensor is faster); --json has both layers' rows",
            "#",
            "# Using devices",
            "#  Rank  0 Group  0 Pid  25051 on         vm device  0 [0000:00:06] NVIDIA H200",
            "#",
            "# Collective all_reduce layer tensor baseline raw nccl 2.28.3 world 1 gpus 1 x NVIDIA H200",
            "#",
            "#                                                                 out-of-place                               in-place                  ",
            "#       size         count      type   redop    root     time   algbw   busbw  #wrong   ratio     time   algbw   busbw  #wrong   ratio ",
            "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)           (B/A)     (us)  (GB/s)  (GB/s)           (B/A) ",
        ];
        let plan = plan_of(
            &[
                "--compare",
                "raw,tensor",
                "-b",
                "8",
                "-e",
                "128M",
                "-f",
                "4",
                "-w",
                "10",
                "-n",
                "50",
            ],
            1,
        );
        let machine = machine(vec![h200(0)]);
        let mut lines = preamble(&plan, &machine);
        lines.extend(collective_header(Collective::AllReduce, &plan, &machine));
        // The N/A note lists the collectives of today's table, with the
        // reason `layer::unsupported` gives.
        let note = lines.iter().position(|line| line.starts_with("# note:"));
        let note = note.map(|index| lines.remove(index)).unwrap_or_default();
        let missing: Vec<&str> = Collective::ALL
            .iter()
            .filter(|&&c| unsupported(LayerKind::Tensor, c, Mode::InPlace).is_some())
            .map(|c| c.name())
            .collect();
        assert!(
            note.starts_with(&format!(
                "# note: the tensor layer has no in-place {} (nccl-tensor's safe API takes",
                missing.join(", ")
            )),
            "{note}"
        );
        assert_eq!(lines, recorded);
    }

    #[test]
    fn devices_and_missing_all_to_all_in_the_preamble() {
        let plan = plan_of(&["--layer", "raw", "-b", "8", "-e", "8"], 2);
        let mut machine = machine(vec![h200(0), h200(1)]);
        machine.native_all_to_all = false;
        let lines = preamble(&plan, &machine);
        assert_eq!(
            lines[0],
            format!(
                "# nccl-perf {} (layer raw) nccl-library 2.28.3 (libnccl.so.2)",
                env!("CARGO_PKG_VERSION")
            )
        );
        assert!(lines[1].starts_with("# nThread 1 nGpus 2 minBytes 8 maxBytes 8 step: 2(factor)"));
        let devices: Vec<&String> = lines.iter().filter(|l| l.starts_with("#  Rank")).collect();
        assert_eq!(devices.len(), 2, "{lines:?}");
        assert!(devices[1].starts_with("#  Rank  1 Group  0 Pid  25051 on         vm device  1"));
        // Across processes each rank names its own process and host.
        let mut remote = h200(1);
        (remote.ordinal, remote.host, remote.pid) = (0, "node7".to_string(), 7);
        let across = preamble(&plan, &self::machine(vec![h200(0), remote]));
        assert!(
            across.contains(
                &"#  Rank  1 Group  0 Pid      7 on      node7 device  0 [0000:00:06] NVIDIA H200"
                    .to_string()
            ),
            "{across:?}"
        );
        assert_eq!(
            lines.last().unwrap(),
            "# note: libnccl 2.28.3 has no ncclAlltoAll (NCCL 2.28+); all_to_all runs as grouped send/recv"
        );
        let header = collective_header(Collective::SendRecv, &plan, &machine);
        assert_eq!(
            header[1],
            "# Collective sendrecv layer raw nccl 2.28.3 world 2 gpus 2 x NVIDIA H200"
        );
        assert_eq!(header.len(), 6, "{header:?}");
        // Without all_to_all in the plan, no note about it.
        let plan = plan_of(&["--layer", "raw", "all_reduce"], 2);
        assert!(
            !preamble(&plan, &machine)
                .join("\n")
                .contains("ncclAlltoAll")
        );
    }

    #[test]
    fn method_flags_show_in_the_preamble_and_headers() {
        let plan = plan_of(
            &[
                "-m", "4", "-u", "2", "-c", "3", "-z", "3", "-C", "1", "-R", "1", "-f", "1", "-i",
                "64K",
            ],
            1,
        );
        let machine = machine(vec![h200(0)]);
        let lines = preamble(&plan, &machine);
        assert!(
            lines[1].ends_with(
                "step: 65536(bytes) warmup iters: 5 iters: 20 agg iters: 4 validation: 3 graph: 0 unalign: 2"
            ),
            "{lines:?}"
        );
        assert_eq!(
            lines[2],
            "# Blocking Enabled: wait and barrier after each outer iteration (-n); time excludes barrier "
        );
        let text = lines.join("\n");
        assert!(
            text.contains("batches of 80 back-to-back call(s)"),
            "{text}"
        );
        assert!(text.contains("(nccl-tests' rotation)"), "{text}");
        // -R 1 is applied: no note, the buffers' line says so.
        assert!(!text.contains("# note: -R 1"), "{text}");
        assert!(
            text.contains("\n# buffers: ncclMemAlloc, registered with ncclCommRegister (-R 1)\n"),
            "{text}"
        );
        let header = collective_header(Collective::AllReduce, &plan, &machine);
        assert!(header[4].contains("root  cputime   algbw"), "{header:?}");
        assert!(!text.contains("Per-Iteration"), "{text}");
        // -I 1: nccl-tests' line after the blocking one, and its columns.
        let timed = plan_of(&["-I", "1", "-K", "2", "-z", "3"], 1);
        let lines = preamble(&timed, &machine);
        assert_eq!(
            lines[3],
            "# Per-Iteration Report: CUDA event timing; i_* uses max over process rows; summary skips first 2 iterations "
        );
        let header = collective_header(Collective::AllReduce, &timed, &machine);
        assert!(header[4].contains("#wrong    i_min    i_max"), "{header:?}");
        let batches = plan_of(&["-I", "1", "--batches", "3"], 1);
        assert!(
            preamble(&batches, &machine)[2]
                .ends_with("; times_us holds the iterations of the 3 batches in order, and the skip applies to each ")
        );
        // Without rotation, the timing line says nothing of it.
        let fixed = plan_of(&["--no-rotate"], 1);
        let text = preamble(&fixed, &machine).join("\n");
        assert!(!text.contains("nccl-tests' rotation"), "{text}");
        assert!(text.contains("# note: --no-rotate"), "{text}");
    }

    #[test]
    fn compare_and_graph_notes() {
        let plan = plan_of(COMPARE_AND_GRAPH, 1);
        let notes = plan_notes(&plan).join("\n");
        assert!(notes.contains("median of 5 batch(es)"), "{notes}");
        assert!(
            notes.contains("CUDA graph of 20 captured call(s) 100 times (time = batch / 2000)"),
            "{notes}"
        );
        assert!(notes.contains("time(tensor) / time(raw)"), "{notes}");
        assert!(notes.contains("no in-place all_gather"), "{notes}");
        assert!(
            notes.contains("stream tracking is paused while capturing"),
            "{notes}"
        );
        assert!(notes.lines().all(|line| line.starts_with("# ")));

        let notes = plan_notes(&plan_of(&["--layer", "raw", "all_reduce"], 2));
        assert_eq!(notes.len(), 1, "{notes:?}");
        assert!(notes[0].contains("20 back-to-back call(s)"));
    }

    #[test]
    fn group_plans_note_the_halves_the_group_lacks() {
        let plan = plan_of(&["--compare", "raw,group"], 2);
        assert_eq!(plan.layers, vec![LayerKind::Raw, LayerKind::Group]);
        assert_eq!(plan.layers_title(), "group vs raw");
        let notes = plan_notes(&plan).join("\n");
        assert!(notes.contains("ProcessGroup op + Work::wait"), "{notes}");
        // Out of place the group has every collective, sendrecv included
        // (one batch_isend_irecv).
        assert!(!notes.contains("no out-of-place"), "{notes}");
        assert!(
            notes.contains("no in-place all_gather, reduce_scatter, all_to_all, sendrecv"),
            "{notes}"
        );
        assert!(notes.contains("(nccl-tensor's safe API takes"), "{notes}");
        // Each reason once per line, sendrecv's included.
        assert_eq!(notes.matches("batch_isend_irecv").count(), 1, "{notes}");
        assert!(!notes.contains("tensor layer"), "{notes}");
        assert!(notes.lines().all(|line| line.starts_with("# ")));

        // Only the plan's collectives are named.
        let notes = plan_notes(&plan_of(&["--layer", "group", "all_gather"], 4));
        assert_eq!(notes.len(), 3, "{notes:?}");
        assert!(notes[2].starts_with(
            "# note: the group layer has no in-place all_gather (nccl-tensor's safe API takes"
        ));
        assert!(notes[2].ends_with("): N/A"), "{notes:?}");

        // No group, no group notes.
        let notes = plan_notes(&plan_of(&["--layer", "tensor"], 1)).join("\n");
        assert!(!notes.contains("group layer"), "{notes}");
    }
}
