//! Services built on the store: attachments (large values kept as files or server blobs),
//! notifications of committed gate changes, moving runs (export and import), the approval
//! page's signing key, and principals' tokens. Each imports the store and the vocabulary below
//! it, never a command or a front end.

pub mod attach;
pub mod auth;
pub mod decide;
pub mod fork;
pub mod inputs;
pub mod notify;
pub mod sign;
pub mod transfer;
