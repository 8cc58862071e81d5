//! One module per command: each takes its args and what it works on, and returns a value
//! that main renders. Commands never print and never build SQL.

pub mod bind;
pub mod decide;
pub mod exec_append;
pub mod gates;
pub mod get;
pub mod init;
pub mod query;
