//! `tailctl thresholds`.

use anyhow::Result;

#[derive(clap::Args)]
pub struct Args {}

pub fn run(_args: Args) -> Result<()> {
    anyhow::bail!("tailctl thresholds: not built yet")
}
