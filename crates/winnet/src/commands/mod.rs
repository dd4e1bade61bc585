//! One module per subcommand; each parses its arguments and calls into the library crates.

pub mod hns;
pub mod hnsd;
