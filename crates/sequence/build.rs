//! Declares the `loom` cfg, under which the lock-free block allocator runs on loom's model
//! checker instead of `std`'s atomics (`RUSTFLAGS="--cfg loom"`, see `tests/loom.rs`).

fn main() {
    println!("cargo::rustc-check-cfg=cfg(loom)");
}
