//! The NCCL release that introduced each function, so that a missing symbol
//! can say which library the caller needs.
//!
//! Each entry is the first public release whose `nccl.h` declares the
//! function: for 2.3.5 to 2.30.7 the first `vX.Y.Z-1` tag of NVIDIA/nccl
//! whose `src/nccl.h.in` has it; for 2.31.2 and 2.32.3 the `nvidia-nccl-cu13`
//! wheels' headers and their libraries' exported symbols (those releases
//! are the first of their series, and the wheels follow 2.30.7). The
//! releases before 2.3.5 were not published as source: their entries keep
//! the series NCCL's documentation names, with patch 0.

use crate::Version;

/// The NCCL release that first exported `function`, or `None` if unknown.
pub fn introduced_in(function: &str) -> Option<Version> {
    let (major, minor, patch) = match function {
        "ncclGetUniqueId" | "ncclCommInitRank" | "ncclCommInitAll" | "ncclCommDestroy"
        | "ncclCommCount" | "ncclCommCuDevice" | "ncclCommUserRank" | "ncclGetErrorString"
        | "ncclReduce" | "ncclBcast" | "ncclAllReduce" | "ncclReduceScatter" | "ncclAllGather"
        | "ncclGroupStart" | "ncclGroupEnd" => (2, 0, 0),
        "ncclBroadcast" => (2, 2, 0),
        "ncclGetVersion" => (2, 3, 0),
        "ncclCommAbort" | "ncclCommGetAsyncError" => (2, 4, 2),
        "ncclSend" | "ncclRecv" => (2, 7, 3),
        "ncclRedOpCreatePreMulSum" | "ncclRedOpDestroy" => (2, 11, 4),
        "ncclGetLastError" => (2, 13, 4),
        "ncclCommInitRankConfig" | "ncclCommFinalize" => (2, 14, 3),
        "ncclCommSplit" => (2, 18, 1),
        "ncclCommRegister" | "ncclCommDeregister" | "ncclMemAlloc" | "ncclMemFree" => (2, 19, 1),
        "ncclGroupSimulateEnd" => (2, 22, 3),
        "ncclCommInitRankScalable" => (2, 23, 4),
        "ncclCommShrink" | "ncclCommWindowRegister" | "ncclCommWindowDeregister" => (2, 27, 3),
        "ncclAlltoAll" | "ncclGather" | "ncclScatter" => (2, 28, 3),
        "ncclCommRevoke" => (2, 28, 7),
        "ncclCommGetUniqueId"
        | "ncclCommGrow"
        | "ncclWinGetUserPtr"
        | "ncclPutSignal"
        | "ncclSignal"
        | "ncclWaitSignal" => (2, 29, 2),
        "ncclCommSuspend" | "ncclCommResume" | "ncclCommMemStats" => (2, 29, 7),
        "ncclParamBind"
        | "ncclParamGetI8"
        | "ncclParamGetI16"
        | "ncclParamGetI32"
        | "ncclParamGetI64"
        | "ncclParamGetU8"
        | "ncclParamGetU16"
        | "ncclParamGetU32"
        | "ncclParamGetU64"
        | "ncclParamGetStr"
        | "ncclParamGet"
        | "ncclParamGetParameter"
        | "ncclParamGetAllParameterKeys"
        | "ncclParamDumpAll" => (2, 30, 4),
        "ncclAllReduceConfig"
        | "ncclBroadcastConfig"
        | "ncclReduceConfig"
        | "ncclAllGatherConfig"
        | "ncclReduceScatterConfig"
        | "ncclAlltoAllConfig"
        | "ncclGatherConfig"
        | "ncclScatterConfig" => (2, 31, 2),
        "ncclSetEncryption" => (2, 32, 3),
        _ => return None,
    };
    Some(Version::new(major, minor, patch))
}
