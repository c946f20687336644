//! The NCCL release that introduced each function, so that a missing symbol
//! can say which library the caller needs.

/// The NCCL release that first exported `function`, or `None` if unknown.
pub fn introduced_in(function: &str) -> Option<&'static str> {
    Some(match function {
        "ncclGetUniqueId" | "ncclCommInitRank" | "ncclCommInitAll" | "ncclCommDestroy"
        | "ncclCommCount" | "ncclCommCuDevice" | "ncclCommUserRank" | "ncclGetErrorString"
        | "ncclReduce" | "ncclBcast" | "ncclAllReduce" | "ncclReduceScatter" | "ncclAllGather" => {
            "2.0"
        }
        "ncclGroupStart" | "ncclGroupEnd" => "2.0",
        "ncclBroadcast" => "2.2",
        "ncclGetVersion" => "2.3",
        "ncclCommAbort" | "ncclCommGetAsyncError" => "2.4",
        "ncclSend" | "ncclRecv" => "2.7",
        "ncclRedOpCreatePreMulSum" | "ncclRedOpDestroy" => "2.11",
        "ncclGetLastError" => "2.13",
        "ncclCommInitRankConfig" | "ncclCommFinalize" => "2.14",
        "ncclCommSplit" => "2.18",
        "ncclCommRegister" | "ncclCommDeregister" | "ncclMemAlloc" | "ncclMemFree" => "2.19",
        "ncclResetDebugInit" => "2.21",
        "ncclGroupSimulateEnd" => "2.22",
        "ncclCommInitRankScalable" => "2.23",
        "ncclCommShrink" | "ncclCommWindowRegister" | "ncclCommWindowDeregister" => "2.27",
        "ncclAlltoAll" | "ncclGather" | "ncclScatter" => "2.28",
        _ => return None,
    })
}
