//! Project automation, run as `cargo xtask <command>`.
fn main() {}
