//! Layer `lowp`: block-scaled FP8 collectives (AllReduce, AllGather, ReduceScatter, AllToAll)
//! on top of the DDA communicator setup. Kernels: `hip_kernels/lowp.cuh`.

pub mod codec;
pub mod launch;
