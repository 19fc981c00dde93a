//! `commgate init`: the scaffolding written, all files or none.

use crate::init;

use anyhow::Result;

use crate::cli::InitArgs;
use commgate_core::diag;
use commgate_core::output::emit;
use commgate_gate::decide::Outcome;

/// `commgate init`: check the values, plan every file, write them (all or none), say what next.
pub(super) fn run(args: &InitArgs) -> Result<Outcome> {
    let values = init::Values::new(args.profile.as_deref(), args.action_ref.as_deref(), args.backend)?;
    let files = init::plan(&values, args.fork_prs)?;
    for path in init::write(&args.dir, &files, args.force)? {
        diag::info(format_args!("wrote {}", path.display()));
    }
    emit(&init::next_steps(&values, args.fork_prs), None)?;
    Ok(Outcome::Passed)
}
