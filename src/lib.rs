//! prose-state's library: everything its binaries run. `prose-state` (src/main.rs) is the
//! command line; `prose-state-mcp` (src/bin/prose-state-mcp.rs) is the MCP server, which
//! `prose-state mcp` becomes, and `prose-state-serve` (src/bin/prose-state-serve.rs) the
//! approval page, which `prose-state serve` becomes. Each server is a binary of its own so
//! that its async runtime and protocol code are not in the command line's: every command is a fresh process, and a
//! bigger binary costs each of them start-up time (relocations) for code it never runs.

pub mod cli;
pub mod cmd;
pub mod context;
mod error;
pub mod language;
pub mod mcp;
mod model;
pub mod output;
pub mod parse;
mod response;
mod run;
pub mod serve;
mod services;
mod store;
mod team;
mod term;

/// What the property tests of the trust rules reach directly (tests/forgery.rs): the
/// derivation and verification of gates over rows read from either backend. Not an API.
#[doc(hidden)]
pub mod testing {
    pub use crate::model::GateStatus;
    pub use crate::store::chain::{check, ChainReport, Derived, Integrity};
    pub use crate::store::seal::{read_key, Anchor, Key};
    pub use crate::store::{AuditRow, GateRow};
    /// The store's rules, for the in-process tier (tests/store_tier.rs): a run's store opened
    /// through a `Context` wired for one test, and its rules called as the commands call them.
    pub mod store {
        pub use crate::model::{sha256_tag, Principal};
        /// The principals book's rules: tokens issued and revoked through its sealed log.
        pub use crate::services::auth::{authenticate, issue};
        pub use crate::store::book_log::{ADD, REVOKE};
        pub use crate::store::effects::Event;
        pub use crate::store::gate_read;
        pub use crate::store::principals::{record, PrincipalBook};
        pub use crate::store::{
            AuditFilter, Authority, Created, Decided, Decision, NewBinding, NewExecution, NewGate,
            Store, Wiring,
        };
        pub use crate::team::Quorum;
    }
    /// The principals book's log and how it is judged (tests/book_forgery.rs).
    pub mod book {
        pub use crate::store::book_log::{replay, sealed, BookEvent, BookState, Change, Voucher};
        pub use crate::store::principals::{bound_here, judge, unissued, Binding, PrincipalRow};
        pub use crate::store::signatures::{book_message, SignsBook};
    }

    /// Commands run in the test's own process, as the binary runs them with `--json`: for a
    /// property test whose point is a rule (a wait's derivation after raw SQL, say), where a
    /// process per step would cost more than the rule. What only a process shows (its exit,
    /// its streams, its environment) stays with the binary.
    pub mod commands {
        use crate::cmd::outcome::Json;
        use crate::context::Context;
        use crate::store::Wiring;
        use std::path::Path;

        /// A command's outcome: its exit code, and its `--json` document (or its error's line).
        #[derive(Debug)]
        pub struct Ran {
            pub code: u8,
            pub json: serde_json::Value,
            pub error: Option<String>,
        }

        /// The wiring a command of the project at `root` is given (as the binary wires it:
        /// [`crate::context::project_wiring`]), with `home` as the user's prose directory (the
        /// audit key, the anchors): made once per project. It keeps connections between
        /// commands, as the MCP server's does.
        pub fn wiring(root: &Path, home: &Path) -> &'static Wiring {
            crate::context::project_wiring(&root.join(".prose"))
                .at_home(home.to_path_buf())
                .keeping()
                .leak()
        }

        /// `prose-state --json --root ROOT ARGS…` run in this process with `wiring`, its
        /// output taken as the MCP server takes it. A command that reads standard input or
        /// follows a log is not for here.
        pub fn run(root: &Path, args: &[&str], wiring: &'static Wiring) -> Ran {
            use clap::Parser;
            let root_flag = format!("--root={}", root.display());
            let argv = ["prose-state", "--json", root_flag.as_str()]
                .into_iter()
                .chain(args.iter().copied());
            let cli = match crate::cli::Cli::try_parse_from(argv) {
                Ok(cli) => cli,
                Err(e) => return failed(2, e.to_string()),
            };
            let ctx = Context::resolve_in(&cli.global, wiring).stdin_is_protocol();
            match crate::cmd::dispatch(&cli.command, &ctx, &mut Json) {
                Some(Ok(out)) => Ran {
                    code: out.code as u8,
                    json: out.value,
                    error: None,
                },
                Some(Err(e)) => {
                    // A command's error, or the binary failing to write its JSON: exit 1.
                    let code = crate::error::code_of(&e).unwrap_or(crate::error::Code::Error);
                    failed(code as u8, format!("{e:#}"))
                }
                None => failed(2, "not a command run here".into()),
            }
        }

        fn failed(code: u8, error: String) -> Ran {
            Ran {
                code,
                json: serde_json::Value::Null,
                error: Some(error),
            }
        }
    }

    /// [`check`]'s report, with every approval and rejection checked for a signature by the
    /// page's public key (`ed25519:HEX`) for the project at `place`, as `gates verify
    /// --signed` checks them.
    pub fn check_signed(
        report: &mut ChainReport,
        rows: &[AuditRow],
        gates: &[GateRow],
        public: &str,
        place: &str,
    ) -> anyhow::Result<()> {
        let by = crate::store::signatures::SignedBy {
            key: crate::services::sign::parse_public(public)?,
            place: Some(place.to_string()),
            accept_carried: None,
        };
        crate::services::sign::check(report, rows, gates, &by);
        Ok(())
    }
}
