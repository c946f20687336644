//! Open MPI for mpirun.sh: the GPU machine has no network and may have no
//! Open MPI (the H200 machine has Ubuntu's 4.1.6, with PMIx 5), so the
//! bundle carries Debian's packages of `mpirun` and of the libraries it
//! loads that a stock Ubuntu 24.04 or Debian image may lack, fetched here
//! with `apt-get download` (when this machine has apt-get). mpirun.sh
//! unpacks them with `dpkg -x` into a folder of its own there and keeps
//! them apart from the machine's own; nothing is installed.
//!
//! The list is `apt-cache depends --recurse openmpi-bin` pruned to what
//! `mpirun` loads when it starts processes on one host (checked with `ldd`
//! over orterun, libopen-rte, libopen-pal, libpmix and the components, and
//! by running the unpacked mpirun with every file of the closure hidden).
//! Left out: the transports only MPI programs load (libfabric1, libucx0,
//! libibverbs1, librdmacm1, libpsm*, libnl-*: mpirun.sh turns off the one
//! ORTE component that wants libnl), hwloc's plugins, OpenCL, X11, the
//! compilers' runtimes, ssh (mpirun.sh launches locally), and what every
//! image has (libc6, zlib1g, libgcc-s1). The names are Debian 12's (the CI
//! image); elsewhere `apt-get download` fails, and the bundle goes without
//! them with a warning.

use std::path::Path;
use std::process::Command;

use crate::{Result, on_path};

/// The bundle's folder of packages.
pub const FOLDER: &str = "openmpi";

/// The packages, with what each gives mpirun.
const PACKAGES: [(&str, &str); 9] = [
    ("openmpi-bin", "orterun (mpirun)"),
    (
        "libopenmpi3",
        "libopen-rte, libopen-pal and Open MPI's components",
    ),
    (
        "openmpi-common",
        "the help texts behind Open MPI's messages",
    ),
    ("libpmix2", "PMIx, the server mpirun runs for its processes"),
    ("libmunge2", "PMIx's munge plugin"),
    ("libevent-core-2.1-7", "the event loop of ORTE and PMIx"),
    ("libevent-pthreads-2.1-7", "the event loop's threads"),
    ("libhwloc15", "the topology mpirun maps processes on"),
    ("libudev1", "what libhwloc links"),
];

/// Downloads the packages into `bundle`/[`FOLDER`]; returns their size, or
/// `None` after a warning when this machine cannot download them.
pub fn fetch(bundle: &Path) -> Result<Option<u64>> {
    if on_path("apt-get").is_none() {
        println!(
            "==> warning: apt-get is not here: the bundle carries no Open MPI, and mpirun.sh will say so"
        );
        return Ok(None);
    }
    let folder = bundle.join(FOLDER);
    std::fs::create_dir_all(&folder)?;
    let names: Vec<&str> = PACKAGES.iter().map(|(name, _)| *name).collect();
    println!("==> apt-get download {}", names.join(" "));
    for (name, what) in PACKAGES {
        println!("    {name}: {what}");
    }
    let output = Command::new("apt-get")
        .arg("download")
        .args(&names)
        .current_dir(&folder)
        .output()
        .map_err(|e| format!("could not run apt-get: {e}"))?;
    if !output.status.success() {
        std::fs::remove_dir_all(&folder)?;
        println!(
            "==> warning: `apt-get download` failed ({}), so the bundle carries no Open MPI and \
             mpirun.sh will say so: {}",
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        );
        return Ok(None);
    }
    let mut bytes = 0;
    for entry in std::fs::read_dir(&folder)? {
        bytes += entry?.metadata()?.len();
    }
    Ok(Some(bytes))
}
