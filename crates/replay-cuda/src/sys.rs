//! Raw driver bindings: cudarc's `sys` layer, re-exported (loaded at run time; nothing of CUDA
//! is needed to build). The checked layer over it is [`crate::result`].

pub use cudarc::driver::sys::*;
