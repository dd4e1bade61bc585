//! The in-memory cluster's tests: whole clusters of the real components on virtual wires, every
//! flow and limitation. One test binary (one link of the whole stack instead of one per file).

mod topology;

mod compiler;
mod l2bridge;
mod limitations;
mod loadbalancing;
mod modes;
mod operator;
mod overlay;
mod trace;
mod trace_explain;
mod vxlan;
