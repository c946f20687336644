//! The nccl-tests source tree the bundle carries for nccl-tests.sh, which
//! builds it on the GPU machine (it has nvcc but no network): the `git
//! archive` of a snapshot's HEAD, with the commit in `COMMIT`.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::Result;

/// The folder of the bundle the source goes to.
pub const SOURCE_FOLDER: &str = "nccl-tests-src";

/// The variable naming the repository when `--nccl-tests` does not.
pub const SNAPSHOT_ENV: &str = "NCCL_TESTS_GIT";

/// The repository to copy: `given` (`--nccl-tests`), else
/// `$NCCL_TESTS_GIT`, else none. A folder is used as it is; a URL
/// (`scheme://...` or `user@host:path`) is cloned (HEAD only) into
/// `target/nccl-tests.git`, replacing an earlier clone.
///
/// # Errors
/// A folder that does not exist, or a clone that fails.
pub fn locate(given: Option<String>, target: &Path) -> Result<Option<PathBuf>> {
    let Some(source) = given.or_else(|| std::env::var(SNAPSHOT_ENV).ok()) else {
        return Ok(None);
    };
    if !is_url(&source) {
        let folder = PathBuf::from(&source);
        if !folder.is_dir() {
            return Err(format!(
                "--nccl-tests / ${SNAPSHOT_ENV} names {source:?}, which is neither a folder nor a git URL"
            )
            .into());
        }
        return Ok(Some(folder));
    }
    let clone = target.join("nccl-tests.git");
    if clone.exists() {
        std::fs::remove_dir_all(&clone)?;
    }
    std::fs::create_dir_all(target)?;
    println!(
        "==> git clone --bare --depth 1 {source} {}",
        clone.display()
    );
    let status = Command::new("git")
        .args(["clone", "--bare", "--depth", "1", &source])
        .arg(&clone)
        .status()
        .map_err(|e| format!("could not run git: {e}"))?;
    if !status.success() {
        return Err(format!("`git clone {source}` failed ({status})").into());
    }
    Ok(Some(clone))
}

/// Whether `source` is a git URL rather than a folder.
fn is_url(source: &str) -> bool {
    source.contains("://")
        || source
            .split_once(':')
            .is_some_and(|(host, _)| host.contains('@') && !host.contains('/'))
}

/// `git -C snapshot ARGS`'s output.
fn git(snapshot: &Path, args: &[&str]) -> Result<String> {
    let output = Command::new("git")
        .arg("-C")
        .arg(snapshot)
        .args(args)
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| format!("could not run git: {e}"))?;
    if !output.status.success() {
        return Err(format!(
            "`git -C {} {}` failed ({})",
            snapshot.display(),
            args.join(" "),
            output.status
        )
        .into());
    }
    Ok(String::from_utf8_lossy(&output.stdout).trim().to_string())
}

/// Extracts the HEAD of the git repository `snapshot` (bare or not) into
/// `bundle/nccl-tests-src`, writes its commit to `COMMIT` there, and
/// returns the bytes written.
pub fn copy_source(snapshot: &Path, bundle: &Path) -> Result<u64> {
    let commit = git(snapshot, &["rev-parse", "HEAD"])?;
    let dest = bundle.join(SOURCE_FOLDER);
    std::fs::create_dir_all(&dest)?;
    let mut archive = Command::new("git")
        .arg("-C")
        .arg(snapshot)
        .args(["archive", "--format=tar", "HEAD"])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|e| format!("could not run git archive: {e}"))?;
    let tar_input = archive.stdout.take().ok_or("git archive has no stdout")?;
    let extracted = Command::new("tar")
        .arg("-x")
        .arg("-C")
        .arg(&dest)
        .stdin(tar_input)
        .status()
        .map_err(|e| format!("could not run tar: {e}"))?;
    let archived = archive.wait()?;
    if !archived.success() || !extracted.success() {
        return Err(format!(
            "copying nccl-tests from {} failed (git archive: {archived}, tar: {extracted})",
            snapshot.display()
        )
        .into());
    }
    std::fs::write(dest.join("COMMIT"), format!("{commit}\n"))?;
    folder_bytes(&dest)
}

/// The bytes of every file under `folder`.
fn folder_bytes(folder: &Path) -> Result<u64> {
    let mut total = 0;
    for entry in std::fs::read_dir(folder)? {
        let entry = entry?;
        let kind = entry.file_type()?;
        if kind.is_dir() {
            total += folder_bytes(&entry.path())?;
        } else if kind.is_file() {
            total += entry.metadata()?.len();
        }
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_head_of_a_snapshot_is_copied_with_its_commit() {
        let work = tempfile::tempdir().unwrap();
        let repo = work.path().join("repo");
        std::fs::create_dir_all(repo.join("src")).unwrap();
        git(&repo, &["init", "-q"]).unwrap();
        std::fs::write(repo.join("Makefile"), "all:\n").unwrap();
        std::fs::write(repo.join("src/common.cu"), "int x;\n").unwrap();
        git(&repo, &["add", "."]).unwrap();
        let identity = ["-c", "user.name=t", "-c", "user.email=t@t"];
        git(
            &repo,
            &[&identity[..], &["commit", "-q", "-m", "one"]].concat(),
        )
        .unwrap();
        // Not committed: not in the copy.
        std::fs::write(repo.join("scratch.txt"), "no").unwrap();
        let bundle = work.path().join("bundle");
        let bytes = copy_source(&repo, &bundle).unwrap();
        let dest = bundle.join(SOURCE_FOLDER);
        assert_eq!(
            std::fs::read_to_string(dest.join("src/common.cu")).unwrap(),
            "int x;\n"
        );
        assert!(!dest.join("scratch.txt").exists());
        let commit = std::fs::read_to_string(dest.join("COMMIT")).unwrap();
        assert_eq!(commit.trim().len(), 40, "{commit}");
        assert_eq!(bytes, folder_bytes(&dest).unwrap());
        assert!(bytes > 0);
        // Not a repository: an error naming it.
        let error = copy_source(&work.path().join("none"), &bundle).unwrap_err();
        assert!(error.to_string().contains("none"), "{error}");
    }

    #[test]
    fn only_the_repository_given_is_used() {
        let work = tempfile::tempdir().unwrap();
        let target = work.path().join("target");
        let folder = work.path().display().to_string();
        assert_eq!(
            locate(Some(folder.clone()), &target).unwrap(),
            Some(work.path().to_path_buf())
        );
        let error = locate(Some("/nonexistent/nccl-tests".into()), &target).unwrap_err();
        assert!(
            error.to_string().contains("neither a folder nor a git URL"),
            "{error}"
        );
        if std::env::var_os(SNAPSHOT_ENV).is_none() {
            assert_eq!(locate(None, &target).unwrap(), None);
        }
    }

    #[test]
    fn urls_are_told_from_folders() {
        for url in [
            "https://github.com/NVIDIA/nccl-tests.git",
            "file:///srv/nccl-tests.git",
            "git@github.com:NVIDIA/nccl-tests.git",
        ] {
            assert!(is_url(url), "{url}");
        }
        for folder in [
            "../nccl-tests",
            "/srv/nccl-tests",
            "C:/x",
            "dir/with@sign:x",
        ] {
            assert!(!is_url(folder), "{folder}");
        }
    }
}
