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

use crate::store::principals::PrincipalBook;
use crate::store::signatures::SignsDecisions;
pub use crate::store::signatures::{check, parse_public, public_tag, Signed};
use anyhow::{anyhow, Result};
use ed25519_dalek::{Signer as _, SigningKey, VerifyingKey};

pub use crate::store::signatures::KEY_FILE;
/// The principals book's setting holding the pinned public key (`ed25519:HEX`).
pub const PINNED: &str = "signed_key";

/// The approval page's signing key.
pub struct Signer {
    key: SigningKey,
    /// `ed25519:HEX` of the public key.
    pub public: String,
    /// The project's place its decisions are signed for (`Signed::place`): set by `serve`.
    pub place: Option<String>,
}

impl Signer {
    /// The key in the user's prose directory (`Wiring::home`): read, or made on first use.
    pub fn load_or_create(wiring: &crate::store::Wiring) -> Result<Signer> {
        let home = wiring.home().ok_or_else(|| {
            anyhow!("no home for the signing key: set PROSE_HOME or HOME (serve signs decisions with a key kept there)")
        })?;
        let what = "the signing key";
        let bytes = match crate::store::seal::read_secret(&home, KEY_FILE, what)? {
            Some(b) => b,
            None => crate::store::seal::create_secret(&home, KEY_FILE, what)?,
        };
        Signer::from_secret(&bytes)
    }

    /// The key in the user's prose directory, if it has one (nothing is made).
    pub fn load(wiring: &crate::store::Wiring) -> Result<Option<Signer>> {
        let Some(home) = wiring.home() else {
            return Ok(None);
        };
        crate::store::seal::read_secret(&home, KEY_FILE, "the signing key")?
            .map(|bytes| Signer::from_secret(&bytes))
            .transpose()
    }

    fn from_secret(bytes: &[u8]) -> Result<Signer> {
        let secret: [u8; 32] = bytes
            .get(..32)
            .and_then(|b| b.try_into().ok())
            .ok_or_else(|| anyhow!("the signing key is not 32 bytes"))?;
        let key = SigningKey::from_bytes(&secret);
        let public = public_tag(&key.verifying_key());
        Ok(Signer {
            key,
            public,
            place: None,
        })
    }
}

impl crate::store::signatures::SignsBook for Signer {
    fn public(&self) -> &str {
        &self.public
    }

    fn sign_book(&self, hash: &str) -> String {
        let sig = self.key.sign(&crate::store::signatures::book_message(hash));
        format!("ed25519:{}", crate::model::hex(&sig.to_bytes()))
    }
}

impl SignsDecisions for Signer {
    /// The signature of a decision, as its audit row keeps it.
    fn sign(&self, what: &Signed) -> serde_json::Value {
        let what = Signed {
            place: self.place.as_deref(),
            ..*what
        };
        let sig = self
            .key
            .sign(&what.message(crate::store::signatures::ANSWERED));
        let mut signature = serde_json::json!({
            "alg": "ed25519",
            "key": self.public,
            "sig": crate::model::hex(&sig.to_bytes()),
        });
        if let Some(place) = &self.place {
            signature["v"] = crate::store::signatures::ANSWERED.into();
            signature["place"] = place.as_str().into();
        }
        signature
    }
}

/// The public key the project pinned, if it requires signed decisions, as the book's sealed
/// log says. A log that cannot be trusted is exit 9; a pin from before the log kept it (the
/// setting alone) is refused until it is pinned again, so that no row stands for a key.
pub fn pinned(book: &mut dyn PrincipalBook) -> Result<Option<VerifyingKey>> {
    let state = crate::store::principals::book_state(book)?.map_err(crate::error::tampered)?;
    if !state.pin_logged && book.setting(PINNED)?.is_some_and(|t| !t.is_empty()) {
        return Err(crate::error::refused(
            "this project pinned a signing key before the principals book's log kept the pin: pin it again, as the approver (`prose-state principals require --signed`)",
        ));
    }
    state
        .pinned
        .map(|tag| parse_public(&tag).map_err(|e| crate::error::tampered(format!("{e:#}"))))
        .transpose()
}

/// Never the secret: the public key alone.
impl std::fmt::Debug for Signer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Signer")
            .field("public", &self.public)
            .finish_non_exhaustive()
    }
}
