//! torchrun's command lines: its underscore spellings, the flags taken
//! as what nccl-launch always does, and those refused by name.

use crate::{launcher, lines_of, text};

#[test]
fn torchruns_spellings_and_its_one_host_flags_are_taken() {
    for spelling in [
        &[
            "--nproc_per_node=2",
            "--master_addr=127.0.0.1",
            "--master_port=29557",
            "--max_restarts=0",
            "--nnodes=1",
            "--node_rank=0",
            "--no_python",
        ][..],
        &[
            "--nproc-per-node",
            "2",
            "--master-addr",
            "127.0.0.1",
            "--master-port",
            "29557",
            "--max-restarts",
            "0",
            "--nnodes",
            "1:1",
            "--node-rank",
            "0",
            "--standalone",
            "--no-python",
        ][..],
    ] {
        let mut args = vec!["--hosts", "simulated"];
        args.extend_from_slice(spelling);
        args.extend_from_slice(&["sh", "-c", "echo $WORLD_SIZE $MASTER_ADDR $MASTER_PORT"]);
        let out = launcher(&args);
        assert!(out.status.success(), "{out:?}");
        let stdout = text(&out.stdout);
        assert_eq!(lines_of(&stdout, 1), ["2 127.0.0.1 29557"], "{stdout}");
    }
}

#[test]
fn flags_nccl_launch_cannot_honour_are_refused_by_name() {
    for (args, said) in [
        (
            &["--max-restarts", "-1"][..],
            "invalid value '-1' for '--max-restarts <N>': expected a number of restarts, 0 or \
             more, got \"-1\"",
        ),
        (
            &["--max_restarts=-1"][..],
            "expected a number of restarts, 0 or more, got \"-1\"",
        ),
        (
            &["--rdzv_backend=c10d"][..],
            "torchrun's --rdzv-backend is not supported by nccl-launch",
        ),
        (
            &["-r", "3"][..],
            "torchrun's --redirects is not supported by nccl-launch",
        ),
        (
            &["-m"][..],
            "torchrun's --module is not supported by nccl-launch",
        ),
        (
            &["--nnodes", "2"][..],
            "invalid --nnodes: expected 1 or 1:1 (nccl-launch runs on one host), got \"2\"",
        ),
    ] {
        let mut command = vec!["-n", "2", "--hosts", "simulated"];
        command.extend_from_slice(args);
        command.push("true");
        let out = launcher(&command);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {out:?}");
        assert!(text(&out.stderr).contains(said), "{args:?}: {out:?}");
    }
    let out = launcher(&["--nproc_per_node=gpu", "true"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(
        text(&out.stderr).contains("torchrun's `auto`, `gpu`, `cpu` and `xpu` are not supported"),
        "{out:?}"
    );
}

#[test]
fn help_names_the_torchrun_flags_that_are_not_supported() {
    let out = launcher(&["--help"]);
    assert!(out.status.success(), "{out:?}");
    let help = text(&out.stdout);
    let section = help
        .split_once("Not supported")
        .map(|(_, rest)| rest)
        .unwrap_or_else(|| panic!("no section of unsupported flags:\n{help}"));
    // Each line: `  [-m, ]--flag: why`.
    let named: Vec<&str> = section
        .lines()
        .filter_map(|line| line.split_once(": "))
        .flat_map(|(flags, _)| flags.split([',', ' ']))
        .filter(|word| word.starts_with("--"))
        .collect();
    for flag in [
        "--rdzv-backend",
        "--rdzv-endpoint",
        "--monitor-interval",
        "--start-method",
        "--module",
        "--run-path",
        "--redirects",
        "--local-ranks-filter",
        "--logs-specs",
    ] {
        assert!(named.contains(&flag), "{flag} not named:\n{help}");
    }
    for taken in ["--max-restarts", "--log-dir", "--tee", "--standalone"] {
        assert!(
            !named.contains(&taken),
            "{taken} named unsupported:\n{help}"
        );
    }
}
