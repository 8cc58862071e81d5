//! `principals add|list|revoke|require`: who may decide with a token, and whether every
//! decision needs one.

use crate::cli::{PrincipalsArgs, PrincipalsCommand};
use crate::error::{not_found, refused, shown};
use crate::model::{now, Principal};
use crate::output::{table, Render};
use crate::store::principals::{PrincipalBook, PrincipalRow, REQUIRE};
use anyhow::Result;
use serde::Serialize;
use std::io::{self, Write};

/// A principal as listed: never its token, nor the token's hash.
#[derive(Debug, Serialize)]
pub struct Listed {
    pub name: String,
    pub kind: String,
    pub created_at: String,
    pub revoked_at: Option<String>,
}

#[derive(Debug, Serialize)]
pub struct PrincipalList {
    pub require: bool,
    /// The approval page's public key every decision must be signed by, when pinned.
    pub signed_key: Option<String>,
    pub principals: Vec<Listed>,
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
    fn text(self, w: &mut dyn Write, _tty: bool) -> io::Result<()> {
        policy(w, Some(self.require), self.signed_key.as_deref())?;
        if self.principals.is_empty() {
            return writeln!(w, "no principals");
        }
        let header = super::header(&["PRINCIPAL", "KIND", "ISSUED", "REVOKED"]);
        let rows: Vec<Vec<String>> = self
            .principals
            .iter()
            .map(|p| {
                vec![
                    p.name.clone(),
                    p.kind.clone(),
                    p.created_at.clone(),
                    p.revoked_at.clone().unwrap_or_else(|| "-".into()),
                ]
            })
            .collect();
        table(w, &header, &rows)
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
}

impl Render for Changed {
    fn text(self, w: &mut dyn Write, _tty: bool) -> io::Result<()> {
        if let Some(p) = &self.principal {
            writeln!(w, "revoked: {p}")?;
        }
        policy(w, self.require, self.signed_key.as_deref())
    }
}

crate::output::one_of!(
    /// What `principals` prints.
    PrincipalsOutput {
        List(PrincipalList),
        Issued(Issued),
        Changed(Changed),
    }
);

fn list(book: Option<&mut (dyn PrincipalBook + 'static)>) -> Result<PrincipalList> {
    let Some(book) = book else {
        return Ok(PrincipalList {
            require: false,
            signed_key: None,
            principals: Vec::new(),
        });
    };
    Ok(PrincipalList {
        require: crate::services::auth::required(book)?,
        signed_key: crate::services::sign::pinned(book)?
            .map(|k| crate::services::sign::public_tag(&k)),
        principals: book
            .principals()?
            .into_iter()
            .map(|r: PrincipalRow| Listed {
                name: r.name,
                kind: r.kind,
                created_at: r.created_at,
                revoked_at: r.revoked_at,
            })
            .collect(),
    })
}

impl super::Run for PrincipalsArgs {
    type Output = PrincipalsOutput;
    fn run(&self, ctx: &crate::context::Context) -> Result<PrincipalsOutput> {
        let writes = matches!(
            self.command,
            Some(PrincipalsCommand::Add(_) | PrincipalsCommand::Require(_))
        );
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
                let mut book = book.expect("made for a write");
                let (token, row) = crate::services::auth::issue(&principal, &now())?;
                if !book.add_principal(&row)? {
                    return Err(refused(format!(
                        "principal already has a token (revoke it first to issue another): {}",
                        shown(principal.as_str())
                    )));
                }
                PrincipalsOutput::Issued(Issued {
                    principal: row.name,
                    kind: row.kind,
                    token,
                    book: book.book_place(),
                })
            }
            Some(PrincipalsCommand::Revoke(a)) => {
                let principal = Principal::parse(&a.name, "principal")?;
                let revoked = match book.as_deref_mut() {
                    Some(b) => b.revoke_principal(principal.as_str(), &now())?,
                    None => false,
                };
                if !revoked {
                    return Err(not_found(format!(
                        "no principal with a token to revoke: {}",
                        shown(principal.as_str())
                    )));
                }
                PrincipalsOutput::Changed(Changed {
                    principal: Some(principal.as_str().to_string()),
                    revoked: Some(true),
                    require: None,
                    signed_key: None,
                })
            }
            Some(PrincipalsCommand::Require(r)) => {
                let mut book = book.expect("made for a write");
                use crate::services::sign::{parse_public, public_tag, Signer};
                let signed = match (&r.key, r.signed) {
                    (_, false) => None,
                    (Some(k), true) => Some(public_tag(&parse_public(k)?)),
                    (None, true) => Some(Signer::load_or_create()?.public),
                };
                book.set_setting(REQUIRE, if r.off { "0" } else { "1" })?;
                if r.off || signed.is_some() {
                    book.set_setting(
                        crate::services::sign::PINNED,
                        signed.as_deref().unwrap_or(""),
                    )?;
                }
                PrincipalsOutput::Changed(Changed {
                    principal: None,
                    revoked: None,
                    require: Some(!r.off),
                    signed_key: signed,
                })
            }
        })
    }
}
