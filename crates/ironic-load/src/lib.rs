//! The library side of `ironic-load`: stand-ins for the peers of an Ironic-compatible
//! service that tests and benchmarks run in-process.
//!
//! - [`fake_agent`]: a simulated ironic-python-agent (its command API, its lookup and
//!   heartbeats), with knobs to inject faults.

pub mod fake_agent;
