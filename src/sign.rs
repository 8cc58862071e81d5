//! Signed decisions. The approval page (`prose-state serve`) holds an Ed25519 signing key,
//! made once in the prose home of the user running it (`serve-signing.key`, 32 bytes of hex,
//! mode 0600, never read through a symlink), and signs every decision it records: the
//! signature covers the run, the gate, its instance, the hash of the prompt shown, the
//! decision, the principal and the time, and is kept in the decision's audit row
//! (`metadata.signature`). A project pins the page's public key (`principals require
//! --signed`); then the command line may not decide (it holds no key), and `gates verify
//! --signed` and `gates wait --require-signed` accept only decisions whose signature checks
//! against the pinned key. Run the page as another OS user (or on another machine, against
//! PostgreSQL), and an agent that can write the database still cannot make a decision that
//! verifies.

use crate::store::chain::{ChainReport, Derived, Integrity};
use crate::store::principals::PrincipalBook;
use crate::store::{AuditRow, GateRow};
use anyhow::{anyhow, Result};
use ed25519_dalek::{Signature, Signer as _, SigningKey, Verifier as _, VerifyingKey};

/// The signing key's file in the prose home of the user running `serve`.
pub const KEY_FILE: &str = "serve-signing.key";
/// The principals book's setting holding the pinned public key (`ed25519:HEX`).
pub const PINNED: &str = "signed_key";
const PREFIX: &str = "ed25519:";

/// What a signature covers, as the gate row and its decision say it.
pub struct Signed<'a> {
    pub run: &'a str,
    pub gate: &'a str,
    pub instance: i64,
    pub prompt_hash: &'a str,
    /// `approved` or `rejected`.
    pub decision: &'a str,
    pub principal: &'a str,
    pub time: &'a str,
}

impl Signed<'_> {
    /// The signed bytes: a JSON array, so that no field can run into the next.
    fn message(&self) -> Vec<u8> {
        serde_json::to_vec(&(
            "prose-state signed decision v1",
            self.run,
            self.gate,
            self.instance,
            self.prompt_hash,
            self.decision,
            self.principal,
            self.time,
        ))
        .unwrap_or_default()
    }

    /// What the decided `gate` row says was decided.
    pub fn of_gate(gate: &'_ GateRow) -> Option<Signed<'_>> {
        Some(Signed {
            run: gate.run_id.as_deref()?,
            gate: &gate.id,
            instance: gate.instance,
            prompt_hash: "",
            decision: gate.status.as_str(),
            principal: gate.resolved_by.as_deref()?,
            time: gate.resolved_at.as_deref()?,
        })
    }
}

/// The approval page's signing key.
pub struct Signer {
    key: SigningKey,
    /// `ed25519:HEX` of the public key.
    pub public: String,
}

impl Signer {
    /// The key of the user running this process: read, or made on first use.
    pub fn load_or_create() -> Result<Signer> {
        let home = crate::seal::prose_home().ok_or_else(|| {
            anyhow!("no home for the signing key: set PROSE_HOME or HOME (serve signs decisions with a key kept there)")
        })?;
        let what = "the signing key";
        let bytes = match crate::seal::read_secret(&home, KEY_FILE, what)? {
            Some(b) => b,
            None => crate::seal::create_secret(&home, KEY_FILE, what)?,
        };
        let secret: [u8; 32] = bytes[..32]
            .try_into()
            .map_err(|_| anyhow!("{what} is not 32 bytes"))?;
        let key = SigningKey::from_bytes(&secret);
        let public = public_tag(&key.verifying_key());
        Ok(Signer { key, public })
    }

    /// The signature of a decision, as its audit row keeps it.
    pub fn sign(&self, what: &Signed) -> serde_json::Value {
        let sig = self.key.sign(&what.message());
        serde_json::json!({
            "alg": "ed25519",
            "key": self.public,
            "sig": crate::model::hex(&sig.to_bytes()),
        })
    }
}

/// `ed25519:HEX` of a public key.
pub fn public_tag(key: &VerifyingKey) -> String {
    format!("{PREFIX}{}", crate::model::hex(key.as_bytes()))
}

/// A public key from its `ed25519:HEX` form (a usage error naming the value when it is not).
pub fn parse_public(tag: &str) -> Result<VerifyingKey> {
    let bad = || {
        crate::error::usage(format!(
            "not an Ed25519 public key (ed25519: and 64 hex digits): {}",
            crate::error::shown(tag)
        ))
    };
    let bytes = tag
        .trim()
        .strip_prefix(PREFIX)
        .and_then(crate::seal::hex_bytes)
        .ok_or_else(bad)?;
    let bytes: [u8; 32] = bytes.try_into().map_err(|_| bad())?;
    VerifyingKey::from_bytes(&bytes).map_err(|_| bad())
}

/// The public key the project pinned, if it requires signed decisions.
pub fn pinned(book: &mut dyn PrincipalBook) -> Result<Option<VerifyingKey>> {
    book.setting(PINNED)?
        .filter(|tag| !tag.is_empty())
        .map(|tag| {
            parse_public(&tag).map_err(|_| {
                crate::error::tampered(format!(
                    "the pinned signing key is not an Ed25519 public key: {}",
                    crate::error::shown(&tag)
                ))
            })
        })
        .transpose()
}

/// Why a decided gate's signature does not stand, if it does not: its decision (the sealed
/// event `derived` names, of the gate's newest sealed opening) must carry a signature by
/// `pinned` over what the gate row says was decided, with the hash of the gate's prompt.
pub fn problem(
    gate: &GateRow,
    rows: &[AuditRow],
    derived: Option<&Derived>,
    pinned: &VerifyingKey,
) -> Option<Integrity> {
    let status = gate.status.as_str();
    if status != "approved" && status != "rejected" {
        return None;
    }
    let unsigned = |why: &str| Some(Integrity::Unattested(why.to_string()));
    let Some(mut what) = Signed::of_gate(gate) else {
        return Some(Integrity::Tampered(
            "decided with no principal or time".into(),
        ));
    };
    let hash = crate::model::sha256_tag(&gate.prompt);
    what.prompt_hash = &hash;
    let decision = derived.and_then(|d| d.decision.as_ref().map(|(_, _, id)| *id));
    let metadata = rows
        .iter()
        .filter(|r| Some(r.id) == decision && r.event_type == status)
        .filter_map(|r| serde_json::from_str::<serde_json::Value>(r.metadata.as_deref()?).ok())
        .find(|m| m["instance"].as_i64().unwrap_or(1) == gate.instance);
    let Some(metadata) = metadata else {
        return unsigned("not signed: its decision is not in its log");
    };
    let sig = &metadata["signature"];
    if sig.is_null() {
        let client = metadata["client"].as_str().unwrap_or("another tool");
        return Some(Integrity::Unattested(format!(
            "not signed: decided through {}",
            crate::error::shown(client)
        )));
    }
    if sig["key"].as_str() != Some(public_tag(pinned).as_str()) {
        return unsigned("signed by a key that is not the pinned one");
    }
    let valid = sig["sig"]
        .as_str()
        .and_then(crate::seal::hex_bytes)
        .and_then(|b| <[u8; 64]>::try_from(b).ok())
        .map(|b| Signature::from_bytes(&b))
        .is_some_and(|s| pinned.verify(&what.message(), &s).is_ok());
    if valid {
        None
    } else {
        Some(Integrity::Tampered(
            "its signature does not match the decision the gate records".into(),
        ))
    }
}

/// Adds to a run's report every decided gate whose signature does not stand (a gate already
/// reported keeps its first finding).
pub fn check(
    report: &mut ChainReport,
    rows: &[AuditRow],
    gates: &[GateRow],
    pinned: &VerifyingKey,
) {
    for gate in gates {
        if report.gates.iter().any(|(g, _)| g == &gate.id) {
            continue;
        }
        if let Some(p) = problem(gate, rows, report.derived.get(&gate.id), pinned) {
            report.gates.push((gate.id.clone(), p));
        }
    }
}

/// Never the secret: the public key alone.
impl std::fmt::Debug for Signer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Signer")
            .field("public", &self.public)
            .finish_non_exhaustive()
    }
}
