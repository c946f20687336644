//! `--compare A,B`: the two layers it names, and why a value is refused.

use clap::ValueEnum;

use crate::layer::LayerKind;

/// `--compare A,B`: the baseline layer A and the layer B measured against it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Compare {
    /// A: the denominator of the ratio; its rows go to JSON only.
    pub baseline: LayerKind,
    /// B: the layer whose table is printed, with the ratio column.
    pub subject: LayerKind,
}

/// Why `--compare` could not be parsed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CompareError {
    /// Not two names separated by one comma.
    #[error("expected two layers separated by a comma (e.g. raw,tensor), got {0:?}")]
    NotTwo(String),
    /// A name that is not a layer.
    #[error("unknown layer {given:?} (expected one of: {expected})")]
    UnknownLayer {
        /// The name given.
        given: String,
        /// The layer names.
        expected: String,
    },
    /// The same layer on both sides.
    #[error("--compare needs two different layers, got {0} twice")]
    SameLayer(&'static str),
}

/// Parses `A,B` (layer names, any case, spaces around them ignored).
///
/// # Errors
/// [`CompareError`] for anything but two different known layers.
pub fn parse_compare(text: &str) -> Result<Compare, CompareError> {
    let parts: Vec<&str> = text.split(',').map(str::trim).collect();
    let [a, b] = parts[..] else {
        return Err(CompareError::NotTwo(text.to_string()));
    };
    if a.is_empty() || b.is_empty() {
        return Err(CompareError::NotTwo(text.to_string()));
    }
    let layer = |name: &str| {
        LayerKind::from_str(name, true).map_err(|_| CompareError::UnknownLayer {
            given: name.to_string(),
            expected: LayerKind::value_variants()
                .iter()
                .map(|kind| kind.name())
                .collect::<Vec<_>>()
                .join(", "),
        })
    };
    let (baseline, subject) = (layer(a)?, layer(b)?);
    if baseline == subject {
        return Err(CompareError::SameLayer(baseline.name()));
    }
    Ok(Compare { baseline, subject })
}

pub(super) fn parse_compare_arg(text: &str) -> Result<Compare, String> {
    parse_compare(text).map_err(|error| error.to_string())
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use crate::cli::Args;

    #[test]
    fn compare_parses() {
        let c = parse_compare("raw,tensor").unwrap();
        assert_eq!((c.baseline, c.subject), (LayerKind::Raw, LayerKind::Tensor));
        let c = parse_compare(" Core , RAW ").unwrap();
        assert_eq!((c.baseline, c.subject), (LayerKind::Core, LayerKind::Raw));
        let c = parse_compare("raw,group").unwrap();
        assert_eq!((c.baseline, c.subject), (LayerKind::Raw, LayerKind::Group));

        let args = Args::try_parse_from(["nccl-perf", "--compare", "raw,core"]).unwrap();
        assert_eq!(args.layers(), vec![LayerKind::Raw, LayerKind::Core]);
        assert_eq!(args.batches(), 5, "--compare defaults to 5 batches");
        let args = Args::try_parse_from(["nccl-perf", "--compare", "raw,tensor", "--batches", "9"])
            .unwrap();
        assert_eq!(args.batches(), 9);
    }

    #[test]
    fn compare_errors() {
        assert_eq!(
            parse_compare("raw,raw"),
            Err(CompareError::SameLayer("raw"))
        );
        assert_eq!(
            parse_compare("tensor,TENSOR"),
            Err(CompareError::SameLayer("tensor"))
        );
        let unknown = parse_compare("raw,groups").unwrap_err();
        assert_eq!(
            unknown.to_string(),
            "unknown layer \"groups\" (expected one of: raw, raw-fingerprint, core, tensor, group, group-caller)"
        );
        for bad in ["raw", "raw,", ",core", "raw,core,tensor", "", "raw;core"] {
            assert!(
                matches!(parse_compare(bad), Err(CompareError::NotTwo(_))),
                "{bad:?}"
            );
        }
        for bad in [
            &["nccl-perf", "--compare", "raw,raw"][..],
            &["nccl-perf", "--compare", "raw,magic"],
            &["nccl-perf", "--compare", "raw"],
            &["nccl-perf", "--compare", "raw,core", "--layer", "tensor"],
            &["nccl-perf", "--compare", "raw,core", "--batches", "0"],
        ] {
            let error = Args::try_parse_from(bad).unwrap_err();
            assert_eq!(error.exit_code(), 2, "{bad:?}");
        }
        let error = Args::try_parse_from(["nccl-perf", "--compare", "core,core"]).unwrap_err();
        assert!(
            error.to_string().contains("two different layers"),
            "{error}"
        );
    }
}
