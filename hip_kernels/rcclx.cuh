// rcclx.cuh - all device code of the shipped library, in include order. build/main.rs
// generates the one translation unit: this header, then one RCCLX_KERNEL line per kernel of
// src/kernel_table.rs. Only rcclx_port.h may contain vendor #ifs.
#ifndef RCCLX_CUH
#define RCCLX_CUH
#include "rcclx_port.h"

#include "common.cuh"     // argument struct, reduction arithmetic, barrier, copy/reduce helpers
#include "allreduce.cuh"  // DDA AllReduce: ll, flat, tree
#include "allgather.cuh"  // DDA AllGather: ll, flat
#include "alltoall.cuh"   // DDA AllToAll: ll, flat
#include "reducescatter.cuh"  // DDA ReduceScatter: ll, flat
#include "broadcast.cuh"  // DDA Broadcast: ll, flat
#include "codec.cuh"      // the FP8 and INT8 block codecs (the definition of their bytes)
#include "reduce.cuh"     // DDA Reduce: ll, flat
#include "lowp.cuh"       // low-precision (FP8 or INT8 on the wire) collectives
#include "alltoallv.cuh"  // GPU-resident AllToAllv (device-side counts; plain or low precision)
#include "stream.cuh"     // the stream protocol: pipelined per-block rings (AllReduce, AllGather, ReduceScatter, AllToAll)
#include "ll128.cuh"      // the LL128 protocol: flagged 128-byte (AMD: 64-byte) lines through credited rings
#include "rail.cuh"       // the low-precision rail step of an AllReduce across hosts (codes the stock library moves)

#endif  // RCCLX_CUH
