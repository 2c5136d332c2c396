//! `idmint completions SHELL`: a shell completion script on stdout
//! (clap_complete), and the hidden `idmint man DIR`: the man pages, one per
//! command (clap_mangen), which `scripts/dist` ships.

use std::io::Write;
use std::path::PathBuf;

use anyhow::Context;
use clap::CommandFactory;
use clap_complete::Shell;

/// `idmint completions`.
#[derive(Debug, clap::Args)]
pub struct CompletionsArgs {
    /// The shell: bash, zsh, fish, elvish or powershell.
    #[arg(value_enum)]
    shell: Shell,
}

/// `idmint man`.
#[derive(Debug, clap::Args)]
pub struct ManArgs {
    /// Where to write `idmint.1` and `idmint-<command>.1` (created if missing).
    dir: PathBuf,
}

pub fn completions(args: CompletionsArgs) -> anyhow::Result<()> {
    let mut command = super::Cli::command();
    let mut out = std::io::stdout().lock();
    clap_complete::generate(args.shell, &mut command, "idmint", &mut out);
    out.flush()?;
    Ok(())
}

pub fn man(args: ManArgs) -> anyhow::Result<()> {
    std::fs::create_dir_all(&args.dir)
        .with_context(|| format!("creating {}", args.dir.display()))?;
    let command = super::Cli::command();
    clap_mangen::generate_to(command, &args.dir)
        .with_context(|| format!("writing the man pages to {}", args.dir.display()))?;
    Ok(())
}
