//! `cargo xtask bindgen [--check]`: regenerate nccl-sys's committed bindings
//! from the pinned `nccl.h`, or fail when the committed files differ.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::{Result, workspace_root};

/// The NCCL release the committed bindings come from; `.ci/run` installs the
/// `nvidia-nccl-cu13` wheel of this version for the check.
pub const PINNED_NCCL_VERSION: &str = "2.32.3";

const BINDINGS: &str = "nccl-sys/src/bindings.rs";
const FUNCTIONS: &str = "nccl-sys/src/functions.rs";

/// Minimal stand-ins for the CUDA headers nccl.h includes: the bindings need
/// only `cudaStream_t` and `cudaEvent_t` (`ncclCollConfig_t`'s
/// `launchCompletionEvent`, NCCL 2.32), so no CUDA toolkit is required to
/// generate them.
const CUDA_STUBS: &[(&str, &str)] = &[
    (
        "cuda_runtime.h",
        "#include <stddef.h>\ntypedef struct CUstream_st *cudaStream_t;\ntypedef struct CUevent_st *cudaEvent_t;\n",
    ),
    ("cuda_fp16.h", ""),
    ("cuda_bf16.h", ""),
];

#[derive(clap::Args)]
pub struct Args {
    /// Compare the generated text with the committed files instead of
    /// writing them; fail if they differ.
    #[arg(long)]
    pub(crate) check: bool,
}

pub fn run(args: Args) -> Result<()> {
    let include_dir = find_include_dir()?;
    let header = include_dir.join("nccl.h");
    let header_version = header_version(&header)?;
    if header_version != PINNED_NCCL_VERSION {
        return Err(format!(
            "{} is NCCL {header_version}, but the bindings are pinned to {PINNED_NCCL_VERSION}; \
             use the nvidia-nccl-cu13=={PINNED_NCCL_VERSION} wheel or point NCCL_INCLUDE_DIR at that header \
             (to move the pin, change PINNED_NCCL_VERSION in xtask/src/bindgen.rs and .ci/run)",
            header.display()
        )
        .into());
    }
    let (bindings, functions) = generate(&header, &include_dir)?;
    let (bindings, functions) = (rustfmt(&bindings)?, rustfmt(&functions)?);
    let root = workspace_root();
    let outputs = [(BINDINGS, bindings), (FUNCTIONS, functions)];
    if args.check {
        let stale: Vec<&str> = outputs
            .iter()
            .filter(|(path, text)| {
                std::fs::read_to_string(root.join(path)).ok().as_deref() != Some(text)
            })
            .map(|(path, _)| *path)
            .collect();
        if !stale.is_empty() {
            return Err(format!(
                "generated bindings are stale: {} differ from what NCCL {PINNED_NCCL_VERSION}'s nccl.h gives; run `cargo xtask bindgen`",
                stale.join(", ")
            )
            .into());
        }
        println!("bindings are up to date with NCCL {PINNED_NCCL_VERSION}");
    } else {
        for (path, text) in outputs {
            std::fs::write(root.join(path), text)?;
            println!("wrote {path}");
        }
    }
    Ok(())
}

/// `NCCL_INCLUDE_DIR`, else the include folder of the installed
/// `nvidia-nccl-cu13` wheel.
fn find_include_dir() -> Result<PathBuf> {
    if let Some(dir) = std::env::var_os("NCCL_INCLUDE_DIR") {
        let dir = PathBuf::from(dir);
        if dir.join("nccl.h").is_file() {
            return Ok(dir);
        }
        return Err(format!("NCCL_INCLUDE_DIR={} has no nccl.h", dir.display()).into());
    }
    let python = std::env::var("PYTHON").unwrap_or_else(|_| "python3".to_string());
    let output = Command::new(&python)
        .args([
            "-c",
            "import os, nvidia.nccl as m; print(os.path.join(list(m.__path__)[0], 'include'))",
        ])
        .output()
        .map_err(|e| format!("could not run {python} to find the nvidia-nccl-cu13 wheel: {e}"))?;
    let dir = PathBuf::from(String::from_utf8_lossy(&output.stdout).trim());
    if output.status.success() && dir.join("nccl.h").is_file() {
        return Ok(dir);
    }
    Err(format!(
        "no nccl.h found: set NCCL_INCLUDE_DIR, or `pip install nvidia-nccl-cu13=={PINNED_NCCL_VERSION}` ({python} said: {})",
        String::from_utf8_lossy(&output.stderr).trim()
    )
    .into())
}

/// Formats generated text the way `cargo fmt` would, so the committed files
/// stay byte-identical after a workspace-wide format.
fn rustfmt(text: &str) -> Result<String> {
    use std::io::Write;
    let mut child = Command::new("rustfmt")
        .args(["--edition", "2024", "--emit", "stdout"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| format!("could not run rustfmt: {e}"))?;
    child
        .stdin
        .take()
        .ok_or("rustfmt has no stdin")?
        .write_all(text.as_bytes())?;
    let output = child.wait_with_output()?;
    if !output.status.success() {
        return Err(format!(
            "rustfmt failed on generated bindings: {}",
            String::from_utf8_lossy(&output.stderr)
        )
        .into());
    }
    Ok(String::from_utf8(output.stdout)?)
}

fn header_version(header: &Path) -> Result<String> {
    let text = std::fs::read_to_string(header)?;
    let define = |name: &str| {
        text.lines()
            .find_map(|line| {
                line.strip_prefix("#define ")?
                    .strip_prefix(name)?
                    .trim()
                    .parse::<u32>()
                    .ok()
            })
            .ok_or_else(|| format!("{} has no #define {name}", header.display()))
    };
    Ok(format!(
        "{}.{}.{}",
        define("NCCL_MAJOR ")?,
        define("NCCL_MINOR ")?,
        define("NCCL_PATCH ")?
    ))
}

/// Runs bindgen and splits its output in two: the types and constants, and
/// the function signatures as an `nccl_functions!` invocation (so the
/// library can be loaded at run time with each symbol resolved on its own).
fn generate(header: &Path, include_dir: &Path) -> Result<(String, String)> {
    let stubs = tempfile::tempdir()?;
    for (name, text) in CUDA_STUBS {
        std::fs::write(stubs.path().join(name), text)?;
    }
    let raw = bindgen::Builder::default()
        .header(header.display().to_string())
        .clang_arg(format!("-I{}", stubs.path().display()))
        .clang_arg(format!("-I{}", include_dir.display()))
        .allowlist_function("nccl.*")
        .allowlist_type("nccl.*")
        .allowlist_var("NCCL_.*")
        .default_enum_style(bindgen::EnumVariation::NewType {
            is_bitfield: false,
            is_global: false,
        })
        .derive_default(true)
        .derive_debug(true)
        .derive_eq(true)
        .derive_hash(true)
        .layout_tests(true)
        .generate_comments(true)
        .generate()
        .map_err(|e| {
            format!(
                "bindgen failed on {}: {e} (is libclang installed?)",
                header.display()
            )
        })?
        .to_string();
    let file = syn::parse_file(&raw)?;
    let (foreign, types): (Vec<syn::Item>, Vec<syn::Item>) = file
        .items
        .into_iter()
        .partition(|item| matches!(item, syn::Item::ForeignMod(_)));
    let banner = format!(
        "// Generated by `cargo xtask bindgen` from NCCL {PINNED_NCCL_VERSION}'s nccl.h. Do not edit.\n"
    );
    let bindings = format!(
        "{banner}\n{}",
        prettyplease::unparse(&syn::File {
            shebang: None,
            attrs: vec![],
            items: types
        })
    );

    let mut functions: Vec<syn::ForeignItem> = Vec::new();
    for item in foreign {
        if let syn::Item::ForeignMod(block) = item {
            functions.extend(block.items);
        }
    }
    let block: syn::Item = syn::parse_quote! { unsafe extern "C" { #(#functions)* } };
    let formatted = prettyplease::unparse(&syn::File {
        shebang: None,
        attrs: vec![],
        items: vec![block],
    });
    let body = formatted
        .strip_prefix("unsafe extern \"C\" {\n")
        .ok_or("unexpected bindgen output: the function block did not start as expected")?;
    let functions = format!(
        "{banner}//! The signature of every NCCL function of the pinned header.\n\n\
         #[allow(unused_imports)]\nuse crate::bindings::*;\n\nnccl_functions! {{\n{body}"
    );
    Ok((bindings, functions))
}
