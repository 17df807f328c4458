//! placeholder, replaced by the gpu layer
