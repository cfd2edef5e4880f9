//! Workloads shared by the criterion benches in `benches/benches/`: each group file builds its
//! inputs from here so that ours and the peers run on the same data.

pub mod workloads;
