//! Build script of hpc-rdma: declares the `loom` cfg (the loom models' switch).

fn main() {
    println!("cargo::rustc-check-cfg=cfg(loom)");
}
