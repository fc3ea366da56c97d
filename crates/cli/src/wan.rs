//! `capstan wan`: the WAN delay router; everything lives in the capstan-wan crate.

pub use capstan_wan::WanArgs;

/// Runs the subcommand; `wan run` ends with its client command's exit code.
pub fn run(args: WanArgs) -> anyhow::Result<()> {
    let code = capstan_wan::main(args)?;
    if code != 0 {
        std::process::exit(code);
    }
    Ok(())
}
