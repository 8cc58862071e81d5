//! Integration tests: each drives the real binary, then checks the database itself.

mod common;

mod attack31;
mod bad_input;
mod bind_get;
mod catalog;
mod concurrency;
mod contract;
mod decisions;
mod diff;
mod exec_append;
mod faults;
mod forgery;
mod gates;
mod guides;
mod init;
mod interop;
mod json_record;
mod lifecycle;
mod literal_vm;
mod mcp;
mod nothing_lost;
mod notify;
mod operate;
mod pg_faults;
mod principals;
mod protocol;
mod query;
mod readme;
mod schema;
mod serve;
mod small_lies;
mod team;
mod travel;
mod vm_day;
mod worked;
