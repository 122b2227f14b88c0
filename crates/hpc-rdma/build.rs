//! Build script of hpc-rdma: declares the `loom` cfg (the loom models' switch) and,
//! with the `ofi` feature, compiles the C bridge to libfabric (`src/ofi/shim.c`)
//! against the system's headers (Debian: `libfabric-dev`). libfabric itself is
//! loaded at run time, so nothing links against it here.

fn main() {
    println!("cargo::rustc-check-cfg=cfg(loom)");
    #[cfg(feature = "ofi")]
    ofi();
}

#[cfg(feature = "ofi")]
fn ofi() {
    println!("cargo::rerun-if-changed=src/ofi/shim.c");
    let mut build = cc::Build::new();
    build
        .file("src/ofi/shim.c")
        .warnings(true)
        .flag_if_supported("-Wno-unused-parameter");
    // Where pkg-config knows libfabric (a non-system prefix), use its headers.
    if let Ok(out) = std::process::Command::new("pkg-config")
        .args(["--cflags-only-I", "libfabric"])
        .output()
    {
        for flag in String::from_utf8_lossy(&out.stdout).split_whitespace() {
            if let Some(dir) = flag.strip_prefix("-I") {
                build.include(dir);
            }
        }
    }
    if let Err(e) = build.try_compile("hpc_rdma_ofi") {
        panic!(
            "the `ofi` feature needs libfabric's headers (<rdma/fabric.h>; Debian/Ubuntu: \
             apt-get install libfabric-dev): {e}"
        );
    }
    // dlopen/dlvsym (in libc since glibc 2.34, in libdl before).
    println!("cargo::rustc-link-lib=dl");
}
