//! Gives the shared object a SONAME on Linux (`libkernel_replay.so`), so a program linked
//! against it records that name, not the path it was linked with, and finds the library at run
//! time through its rpath or the loader's search path (the CMake package's imported target and
//! the pkg-config file rely on it).

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux") {
        println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libkernel_replay.so");
    }
}
