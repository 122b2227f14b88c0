//! Declares the `loom` cfg of the loom models (`RUSTFLAGS="--cfg loom"`).

fn main() {
    println!("cargo::rustc-check-cfg=cfg(loom)");
}
