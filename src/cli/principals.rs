//! Who acts and decides: `--as` and `--token-file`, and `principals` with its groups and
//! policy.

use clap::{Args, Subcommand, ValueEnum};
use std::path::PathBuf;

/// Who is acting: `--as NAME`, else PROSE_PRINCIPAL, else the login name.
#[derive(Debug, Args)]
pub struct PrincipalArg {
    /// Act as this principal (default: PROSE_PRINCIPAL, else the login name; a write with
    /// neither is recorded as the account it runs as)
    #[arg(long = "as", env = "PROSE_PRINCIPAL", value_name = "PRINCIPAL")]
    pub principal: Option<String>,
}

/// A decider's token: the principal it authenticates decides.
#[derive(Debug, Args)]
pub struct TokenArg {
    /// Act as the principal this token authenticates: a file holding the token
    /// `principals add` issued (without it: PROSE_TOKEN, if set)
    #[arg(long, value_name = "FILE")]
    pub token_file: Option<PathBuf>,
}

#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct PrincipalsArgs {
    #[command(subcommand)]
    pub command: Option<PrincipalsCommand>,
}

#[derive(Debug, Subcommand)]
pub enum PrincipalsCommand {
    /// Issue a token for NAME, printed once (kept only as an Argon2id hash); a revoked
    /// principal gets a new one
    Add(PrincipalAddArgs),
    /// List the principals, with when each token was issued or revoked (never a token)
    List,
    /// Revoke NAME's token: it no longer authenticates anything
    Revoke(PrincipalNameArgs),
    /// Require a token for every decision (`approve`/`reject` refuse `--as` alone), or with
    /// --signed a decision signed by the approval page; --off lifts it
    Require(RequireArgs),
    /// The groups an allow list names as group:G: add or remove members, or list them
    /// (kept in the principals book's sealed log)
    Group(GroupArgs),
    /// The project's policy: with --separate-duties on, no gate made from then on may be
    /// approved by the principal who started its run or created it (without an option: show it)
    Policy(PolicyArgs),
    /// Bind the book to this project (or server database) after moving or restoring it on
    /// purpose: a book bound elsewhere admits no one here. Signed by the pinned key's holder
    /// when one is pinned
    Rebind,
}

#[derive(Debug, Args)]
pub struct GroupArgs {
    #[command(subcommand)]
    pub command: GroupCommand,
}

#[derive(Debug, Subcommand)]
pub enum GroupCommand {
    /// Add principals to GROUP (made by its first member)
    Add(GroupMembersArgs),
    /// Remove principals from GROUP: an approval they gave a gate that has not reached its
    /// quorum stops counting
    Remove(GroupMembersArgs),
    /// Every group and its members
    List,
}

#[derive(Debug, Args)]
pub struct GroupMembersArgs {
    /// The group, as an allow list names it after group:
    pub group: String,
    /// The principals
    #[arg(required = true)]
    pub principals: Vec<String>,
}

#[derive(Debug, Args)]
pub struct PolicyArgs {
    /// Separation of duties for gates made from now on: the run's starter and the gate's
    /// creator may not approve it
    #[arg(long, value_name = "on|off")]
    pub separate_duties: Option<OnOff>,
}

/// A switch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OnOff {
    On,
    Off,
}

#[derive(Debug, Args)]
pub struct PrincipalAddArgs {
    /// The principal, as decisions will record it
    pub name: String,
    /// An agent: recorded as agent:NAME, which can never decide a `user` gate
    #[arg(long)]
    pub agent: bool,
    /// Also add the principal to this group (repeatable)
    #[arg(long = "group", value_name = "GROUP")]
    pub groups: Vec<String>,
}

#[derive(Debug, Args)]
pub struct PrincipalNameArgs {
    /// The principal (agent:NAME for an agent)
    pub name: String,
}

#[derive(Debug, Args)]
pub struct RequireArgs {
    /// Lift the requirement (of a token, and of signed decisions)
    #[arg(long, conflicts_with_all = ["signed", "key"])]
    pub off: bool,
    /// Also require every decision to be signed by the approval page (`serve`): authorizes
    /// its key (as the audit key's holder) and pins it (as the key's holder: run as the user
    /// serve runs as); the command line may then not decide, and every later change to the
    /// book is that key's holder's
    #[arg(long)]
    pub signed: bool,
    /// The key (ed25519:HEX, as `serve --show-key` prints it): authorized only, when this
    /// user does not hold it (its holder then pins it); with a key pinned, re-pinned by the
    /// pinned key's holder; default: this user's serve key, made if it has none
    #[arg(long, value_name = "KEY", requires = "signed")]
    pub key: Option<String>,
}
