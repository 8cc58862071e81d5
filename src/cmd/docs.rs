//! `completions` and `man`: generated from the command-line definitions.

use crate::cli::{Cli, CompletionsArgs};
use crate::context::Context;
use crate::output::Render;
use anyhow::Result;
use serde::{Serialize, Serializer};
use std::io::{self, Write};

/// Generated text, written as it is (never as JSON).
pub struct Generated(Vec<u8>);

impl Serialize for Generated {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&String::from_utf8_lossy(&self.0))
    }
}

impl Render for Generated {
    fn text(self, w: &mut dyn Write, _tty: bool) -> io::Result<()> {
        w.write_all(&self.0)
    }
}

impl super::Run for CompletionsArgs {
    type Output = Generated;
    // Rendered into memory first: clap_complete panics when its writer fails, and a closed
    // pipe (`| head`) must stay a quiet exit 0.
    fn run(&self, _ctx: &Context) -> Result<Generated> {
        use clap::CommandFactory;
        let mut script = Vec::new();
        clap_complete::generate(self.shell, &mut Cli::command(), "prose-state", &mut script);
        Ok(Generated(script))
    }
}

/// `man` (no options).
pub struct Man;

impl super::Run for Man {
    type Output = Generated;
    fn run(&self, _ctx: &Context) -> Result<Generated> {
        use clap::CommandFactory;
        let mut page = Vec::new();
        clap_mangen::Man::new(Cli::command()).render(&mut page)?;
        Ok(Generated(page))
    }
}
