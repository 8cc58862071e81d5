//! `principals add|list|revoke|require`: who may decide with a token, and whether every
//! decision needs one.

use crate::cli::{GroupCommand, OnOff, PrincipalsArgs, PrincipalsCommand};
use crate::error::{not_found, refused, shown, tampered, usage};
use crate::model::{group_name, now, Principal};
use crate::output::Render;
use crate::services::sign::{self, parse_public, public_tag, Signer, PINNED};
use crate::store::book_log::{self, Change};
use crate::store::principals::{record, PrincipalBook, PrincipalRow, REQUIRE};
use anyhow::Result;
use serde::Serialize;
use std::io::{self, Write};

#[derive(Debug, Default, Serialize)]
pub struct PrincipalList {
    pub require: bool,
    /// The approval page's public key every decision must be signed by, when pinned.
    pub signed_key: Option<String>,
    /// As listed (`cmd::rows`): never its token, nor the token's hash.
    pub principals: Vec<PrincipalRow>,
    /// The listed rows the book's sealed log did not issue (written behind prose-state's
    /// back): name and why. Their tokens are refused.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub not_issued: Vec<NotIssued>,
}

#[derive(Debug, Serialize)]
pub struct NotIssued {
    pub name: String,
    pub why: String,
}

/// What the project requires of a decision, as `principals` says it.
fn policy(w: &mut dyn Write, require: Option<bool>, signed_key: Option<&str>) -> io::Result<()> {
    if let Some(r) = require {
        let yes = if r { "yes" } else { "no" };
        writeln!(w, "decisions need a token: {yes}")?;
    }
    if let Some(k) = signed_key {
        writeln!(
            w,
            "decisions must be signed by the approval page's key: {k}"
        )?;
    }
    Ok(())
}

impl Render for PrincipalList {
    fn warnings(&self) -> Vec<String> {
        self.not_issued
            .iter()
            .map(|n| {
                format!(
                    "principal {} was not issued by the book's sealed log ({}): its token is refused",
                    shown(&n.name),
                    n.why
                )
            })
            .collect()
    }

    fn text(self, w: &mut dyn Write, _tty: bool) -> io::Result<()> {
        policy(w, Some(self.require), self.signed_key.as_deref())?;
        if self.principals.is_empty() {
            return writeln!(w, "no principals");
        }
        let header = ["PRINCIPAL", "KIND", "ISSUED", "REVOKED"];
        super::table_of(w, &header, &self.principals, |p| {
            vec![
                p.name.clone(),
                p.kind.clone(),
                p.created_at.clone(),
                p.revoked_at.clone().unwrap_or_else(|| "-".into()),
            ]
        })
    }
}

/// A token just issued: printed this once.
#[derive(Debug, Serialize)]
pub struct Issued {
    pub principal: String,
    pub kind: String,
    pub token: String,
    pub book: String,
}

impl Render for Issued {
    fn text(self, w: &mut dyn Write, _tty: bool) -> io::Result<()> {
        writeln!(w, "{}", self.token)
    }

    // On stderr: stdout is the token alone, for `> token-file`.
    fn notes(&self) -> Vec<String> {
        vec![format!(
            "token of {} issued (kept only as a hash in {}): it is shown this once",
            self.principal, self.book
        )]
    }
}

#[derive(Debug, Serialize)]
pub struct Changed {
    pub principal: Option<String>,
    pub revoked: Option<bool>,
    pub require: Option<bool>,
    /// The pinned public key, when `require --signed` pinned one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub signed_key: Option<String>,
    /// A key authorized to be pinned, which its holder has yet to pin.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub authorized_key: Option<String>,
}

impl Render for Changed {
    fn text(self, w: &mut dyn Write, _tty: bool) -> io::Result<()> {
        if let Some(p) = &self.principal {
            writeln!(w, "revoked: {p}")?;
        }
        policy(w, self.require, self.signed_key.as_deref())?;
        if let Some(k) = &self.authorized_key {
            writeln!(
                w,
                "signing key authorized: {k}; its holder pins it with `prose-state principals require --signed`, run as the user the approval page runs as"
            )?;
        }
        Ok(())
    }
}

/// The groups, as the book's sealed log says: group → members.
#[derive(Debug, Serialize)]
#[serde(transparent)]
pub struct Groups(pub std::collections::BTreeMap<String, Vec<String>>);

impl Render for Groups {
    fn text(self, w: &mut dyn Write, _tty: bool) -> io::Result<()> {
        if self.0.is_empty() {
            return writeln!(w, "no groups");
        }
        for (g, members) in &self.0 {
            writeln!(w, "group:{g}: {}", members.join(", "))?;
        }
        Ok(())
    }
}

/// A change to the groups or the policy, and what the log says after it.
#[derive(Debug, Serialize)]
pub struct BookChanged {
    /// `added`, `removed`, `unchanged` (every principal was already as asked) or `policy`.
    pub change: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub members: Option<Vec<String>>,
    pub separate_duties: bool,
}

impl Render for BookChanged {
    fn text(self, w: &mut dyn Write, _tty: bool) -> io::Result<()> {
        match (&self.group, &self.members) {
            (Some(g), Some(m)) => writeln!(
                w,
                "group:{g} ({}): {}",
                self.change,
                if m.is_empty() {
                    "no members".to_string()
                } else {
                    m.join(", ")
                }
            ),
            _ => writeln!(
                w,
                "separation of duties (for gates made from now on): {}",
                if self.separate_duties { "on" } else { "off" }
            ),
        }
    }
}

crate::output::one_of!(
    /// What `principals` prints.
    PrincipalsOutput {
        List(PrincipalList),
        Issued(Issued),
        Changed(Changed),
        Groups(Groups),
        BookChanged(BookChanged),
    }
);

/// Records `changes` (and writes the book's rows with `rows`), signed by this user's serve
/// key where the book is pinned to it (see `principals::record`).
fn change_book(
    book: &mut dyn PrincipalBook,
    changes: &[Change],
    mut rows: impl FnMut(&mut dyn PrincipalBook) -> Result<()>,
) -> Result<()> {
    let signer = Signer::load(book.wiring())?;
    record(book, changes, signer_of(&signer), false, &mut rows)
}

/// The signer a change is vouched for with, when the book is pinned to its key.
fn signer_of(s: &Option<Signer>) -> Option<&dyn crate::store::signatures::SignsBook> {
    s.as_ref().map(|s| s as _)
}

/// What the book's sealed log says now; a log that cannot be trusted is exit 9.
fn state(book: &mut dyn PrincipalBook) -> Result<book_log::BookState> {
    crate::store::principals::book_state(book)?.map_err(tampered)
}

/// A member of a group: a person (agents never approve).
fn member(raw: &str) -> Result<String> {
    let p = Principal::parse(raw, "member")?;
    if p.is_agent() {
        return Err(usage(format!(
            "an agent may not be in a group (agents never approve): {}",
            shown(p.as_str())
        )));
    }
    Ok(p.as_str().to_string())
}

fn members_of(state: &book_log::BookState, group: &str) -> Vec<String> {
    state
        .roster
        .groups
        .get(group)
        .map(|m| m.iter().cloned().collect())
        .unwrap_or_default()
}

fn list(book: Option<&mut (dyn PrincipalBook + 'static)>) -> Result<PrincipalList> {
    let Some(book) = book else {
        return Ok(PrincipalList::default());
    };
    // The rows are listed even when the log cannot be trusted, so that it can be put right;
    // what the project requires is the log's, and then unknown.
    let principals = book.principals()?;
    let (require, signed_key, not_issued) = match crate::store::principals::book_state(book)? {
        Ok(state) => (
            crate::services::auth::required(book)?,
            sign::pinned(book)?.map(|k| public_tag(&k)),
            crate::store::principals::not_issued(&state, &principals)
                .into_iter()
                .map(|(name, why)| NotIssued { name, why })
                .collect(),
        ),
        Err(why) => {
            crate::output::warn(&format!(
                "{why}: no token is accepted until it is put right"
            ));
            (true, None, Vec::new())
        }
    };
    Ok(PrincipalList {
        require,
        signed_key,
        principals,
        not_issued,
    })
}

impl super::Run for PrincipalsArgs {
    type Output = PrincipalsOutput;
    fn run(&self, ctx: &crate::context::Context) -> Result<PrincipalsOutput> {
        let writes = match &self.command {
            Some(
                PrincipalsCommand::Add(_)
                | PrincipalsCommand::Require(_)
                | PrincipalsCommand::Rebind,
            ) => true,
            Some(PrincipalsCommand::Group(g)) => !matches!(g.command, GroupCommand::List),
            Some(PrincipalsCommand::Policy(p)) => p.separate_duties.is_some(),
            _ => false,
        };
        let now = now();
        // Who runs the change, as `Context::principal` names anyone (a claim: the book's
        // writer is trusted); a name outside the grammar records no one.
        let claimed = crate::cli::PrincipalArg {
            principal: std::env::var("PROSE_PRINCIPAL").ok(),
        };
        let actor = ctx
            .principal(&claimed)
            .ok()
            .flatten()
            .map(|p| p.to_string());
        let change = |event, principal, grp, value| Change {
            event,
            principal,
            grp,
            value,
            actor: actor.as_deref(),
            at: &now,
        };
        let mut book = ctx.principal_book(writes)?;
        Ok(match &self.command {
            None | Some(PrincipalsCommand::List) => {
                PrincipalsOutput::List(list(book.as_deref_mut())?)
            }
            Some(PrincipalsCommand::Add(a)) => {
                let raw = if a.agent && !a.name.starts_with("agent:") {
                    format!("agent:{}", a.name)
                } else {
                    a.name.clone()
                };
                let principal = Principal::parse(&raw, "principal")?;
                let groups = a
                    .groups
                    .iter()
                    .map(|g| group_name(g, "--group"))
                    .collect::<Result<Vec<_>>>()?;
                if principal.is_agent() && !groups.is_empty() {
                    member(principal.as_str())?;
                }
                let mut book = book.expect("made for a write");
                let taken = || {
                    refused(format!(
                        "principal already has a token (revoke it first to issue another): {}",
                        shown(principal.as_str())
                    ))
                };
                if book
                    .principal(principal.as_str())?
                    .is_some_and(|r| r.revoked_at.is_none())
                {
                    return Err(taken());
                }
                let (token, row) = crate::services::auth::issue(&principal, &now)?;
                let name = Some(principal.as_str());
                // The issuance seals the digest of the token's hash: a hash replaced in the
                // book's rows is no token the log issued.
                let digest = crate::model::sha256_tag(&row.token_hash);
                let mut changes = vec![change(book_log::ADD, name, None, Some(digest.as_str()))];
                for g in &groups {
                    changes.push(change(book_log::GROUP_ADD, name, Some(g), None));
                }
                change_book(book.as_mut(), &changes, |b: &mut dyn PrincipalBook| match b
                    .add_principal(&row)?
                {
                    true => Ok(()),
                    false => Err(taken()),
                })?;
                PrincipalsOutput::Issued(Issued {
                    principal: row.name,
                    kind: row.kind,
                    token,
                    book: book.book_place(),
                })
            }
            Some(PrincipalsCommand::Revoke(a)) => {
                let principal = Principal::parse(&a.name, "principal")?;
                let gone = || {
                    let name = shown(principal.as_str());
                    not_found(format!("no principal with a token to revoke: {name}"))
                };
                let Some(b) = book.as_deref_mut() else {
                    return Err(gone());
                };
                let live = b
                    .principal(principal.as_str())?
                    .is_some_and(|r| r.revoked_at.is_none());
                if !live && !state(b)?.tokens.contains_key(principal.as_str()) {
                    return Err(gone());
                }
                let name = Some(principal.as_str());
                let changes = [change(book_log::REVOKE, name, None, None)];
                change_book(b, &changes, |b: &mut dyn PrincipalBook| {
                    b.revoke_principal(principal.as_str(), &now).map(drop)
                })?;
                PrincipalsOutput::Changed(Changed {
                    principal: Some(principal.as_str().to_string()),
                    revoked: Some(true),
                    require: None,
                    signed_key: None,
                    authorized_key: None,
                })
            }
            Some(PrincipalsCommand::Require(r)) => {
                let mut book = book.expect("made for a write");
                let signed = match (&r.key, r.signed) {
                    (_, false) => None,
                    (Some(k), true) => Some(public_tag(&parse_public(k)?)),
                    (None, true) => Some(Signer::load_or_create(ctx.opts.wiring)?.public),
                };
                let signer = Signer::load(ctx.opts.wiring)?;
                // About to pin its own key: read as the key's holder reads a book it will
                // vouch for.
                let before = match signer.as_ref().zip(signed.as_deref()) {
                    Some((s, k)) if s.public == k => {
                        crate::store::principals::book_state_to_pin(book.as_mut())?
                            .map_err(tampered)?
                    }
                    _ => state(book.as_mut())?,
                };
                // A first pin is the work of two: the audit key's holder authorizes the key
                // (sealed with the audit key), and the key's holder pins it (signed by it). A
                // user who holds both does both at once; one who holds only the audit key
                // authorizes, and the approver, run as itself, pins.
                let holds = |k: &str| signer.as_ref().is_some_and(|s| s.public == k);
                let authorize = signed
                    .as_deref()
                    .filter(|k| before.pinned.is_none() && !before.authorized.contains(*k));
                if let (Some(_), None) = (authorize, ctx.opts.wiring.key_for_reading()?) {
                    return Err(refused(format!(
                        "the signing key {} is not authorized yet: the holder of the project's audit key authorizes it first (`prose-state principals require --signed --key {}`, run as the project's user), then its holder pins it with this command",
                        signed.as_deref().unwrap_or_default(),
                        signed.as_deref().unwrap_or_default(),
                    )));
                }
                let pins = signed
                    .as_deref()
                    .filter(|k| holds(k) || before.pinned.is_some());
                let on = if r.off { "off" } else { "on" };
                let mut changes = Vec::new();
                if let Some(k) = authorize {
                    changes.push(change(
                        book_log::POLICY,
                        None,
                        Some(book_log::KEY_AUTHORIZED),
                        Some(k),
                    ));
                }
                // Lifted: a `signed_key` row with no value (the log keeps no empty text).
                if pins.is_some() || (r.off && before.pinned.is_some()) {
                    changes.push(change(
                        book_log::POLICY,
                        None,
                        Some(book_log::SIGNED_KEY),
                        pins,
                    ));
                }
                changes.push(change(
                    book_log::POLICY,
                    None,
                    Some(book_log::REQUIRE),
                    Some(on),
                ));
                let pin = pins.unwrap_or("");
                record(
                    book.as_mut(),
                    &changes,
                    signer_of(&signer),
                    false,
                    &mut |b| {
                        b.set_setting(REQUIRE, if r.off { "0" } else { "1" })?;
                        if r.off || pins.is_some() {
                            b.set_setting(PINNED, pin)?;
                        }
                        Ok(())
                    },
                )?;
                PrincipalsOutput::Changed(Changed {
                    principal: None,
                    revoked: None,
                    require: Some(!r.off),
                    signed_key: pins.map(str::to_string),
                    authorized_key: signed.clone().filter(|_| pins.is_none()),
                })
            }
            Some(PrincipalsCommand::Rebind) => {
                let mut book = book.expect("made for a write");
                let here = book.identity(true)?;
                let signer = Signer::load(ctx.opts.wiring)?;
                let bound_before = match crate::store::principals::book_state(book.as_mut())? {
                    Ok(s) => s.bound,
                    Err(_) => None,
                };
                let changed = bound_before.is_none() || bound_before != here;
                if changed {
                    record(
                        book.as_mut(),
                        &[],
                        signer_of(&signer),
                        true,
                        &mut |_| Ok(()),
                    )?;
                }
                PrincipalsOutput::BookChanged(BookChanged {
                    change: if changed { "bound" } else { "unchanged" }.into(),
                    group: None,
                    members: None,
                    separate_duties: state(book.as_mut())?.separate_duties,
                })
            }
            Some(PrincipalsCommand::Group(g)) => {
                let Some(mut book) = book else {
                    return Ok(PrincipalsOutput::Groups(Groups(Default::default())));
                };
                let before = state(book.as_mut())?;
                let (group, names, add) = match &g.command {
                    GroupCommand::List => {
                        let groups = before.roster.groups.keys();
                        let all = groups.map(|g| (g.clone(), members_of(&before, g)));
                        return Ok(PrincipalsOutput::Groups(Groups(all.collect())));
                    }
                    GroupCommand::Add(m) => (&m.group, &m.principals, true),
                    GroupCommand::Remove(m) => (&m.group, &m.principals, false),
                };
                let group = group_name(group, "group")?;
                let names = names
                    .iter()
                    .map(|n| member(n))
                    .collect::<Result<Vec<_>>>()?;
                let members = members_of(&before, &group);
                if !add {
                    if let Some(n) = names.iter().find(|n| !members.contains(n)) {
                        return Err(not_found(format!("{} is not in group:{group}", shown(n))));
                    }
                }
                let event = if add {
                    book_log::GROUP_ADD
                } else {
                    book_log::GROUP_REMOVE
                };
                let mut seen = std::collections::BTreeSet::new();
                let changes: Vec<Change> = names
                    .iter()
                    .filter(|n| add != members.contains(n) && seen.insert(n.as_str()))
                    .map(|n| change(event, Some(n.as_str()), Some(group.as_str()), None))
                    .collect();
                let what = match (changes.is_empty(), add) {
                    (true, _) => "unchanged",
                    (false, true) => "added",
                    (false, false) => "removed",
                };
                change_book(book.as_mut(), &changes, |_: &mut dyn PrincipalBook| Ok(()))?;
                let after = state(book.as_mut())?;
                PrincipalsOutput::BookChanged(BookChanged {
                    change: what.into(),
                    members: Some(members_of(&after, &group)),
                    group: Some(group),
                    separate_duties: after.separate_duties,
                })
            }
            Some(PrincipalsCommand::Policy(pol)) => {
                let before = match book.as_deref_mut() {
                    Some(b) => state(b)?,
                    None => Default::default(),
                };
                let wanted = pol.separate_duties.map(|v| v == OnOff::On);
                let changed = wanted.is_some_and(|w| w != before.separate_duties);
                if let (true, Some(w), Some(book)) = (changed, wanted, book.as_deref_mut()) {
                    let value = Some(if w { "on" } else { "off" });
                    let duties = Some(book_log::SEPARATE_DUTIES);
                    let changes = [change(book_log::POLICY, None, duties, value)];
                    change_book(book, &changes, |_: &mut dyn PrincipalBook| Ok(()))?;
                }
                PrincipalsOutput::BookChanged(BookChanged {
                    change: if changed { "policy" } else { "unchanged" }.into(),
                    group: None,
                    members: None,
                    separate_duties: wanted.unwrap_or(before.separate_duties),
                })
            }
        })
    }
}
