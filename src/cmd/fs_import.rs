//! `import --from filesystem`: a run of OpenProse's filesystem state mode.

use crate::cli::ImportArgs;
use crate::context::Context;
use anyhow::Result;

pub fn run(_args: &ImportArgs, _ctx: &Context) -> Result<super::import::Imported> {
    Err(crate::error::usage("--from filesystem is not built yet"))
}
