//! `delayq data check|repair`: offline tools for an embedded data directory.
//!
//! `check` reads every log of the data directory (each shard's, the settings') and its snapshots the way a start would, changes nothing and
//! reports each problem with its file and byte offset. `repair` is the explicit step after a
//! start refused damaged data: it cuts each damaged log back to its valid prefix, keeping
//! what it cuts (see `delayq_log::repair`). Both work on the files, so the server must not be
//! running (repair takes each log's lock and fails if it is held).

use std::io::Write;

use delayq::storage::embedded;
use delayq_log::{Problem, RepairAction, RepairOptions};

use crate::args::{DataArgs, DataCommand, RepairArgs};
use crate::error::CliError;

/// Runs a `delayq data` command, writing its report to `out`.
pub fn run(command: DataCommand, out: &mut dyn Write) -> Result<(), CliError> {
    match command {
        DataCommand::Check(args) => check(&args, out),
        DataCommand::Repair(args) => repair(&args, out),
    }
}

/// Every log of the data directory: the shards' and the settings'.
fn logs(args: &DataArgs) -> Result<Vec<std::path::PathBuf>, CliError> {
    embedded::log_dirs(&args.data_dir).map_err(|e| CliError::Data(e.to_string()))
}

fn describe(problem: &Problem) -> String {
    match problem {
        Problem::TornTail(t) => format!(
            "torn tail in {} at byte offset {} ({} bytes; a start cuts it by itself)",
            t.file.display(),
            t.offset,
            t.bytes_cut
        ),
        Problem::Corrupt(c) => c.to_string(),
        Problem::MissingRecords {
            from,
            to,
            next_file,
        } => format!(
            "records {from} to {to} are missing before {}",
            next_file.display()
        ),
    }
}

fn check(args: &DataArgs, out: &mut dyn Write) -> Result<(), CliError> {
    let mut damaged = 0;
    for dir in logs(args)? {
        let report = delayq_log::inspect(&dir).map_err(|e| CliError::Data(e.to_string()))?;
        let blocking: Vec<&Problem> = report
            .problems
            .iter()
            .filter(|p| !matches!(p, Problem::TornTail(_)))
            .collect();
        damaged += blocking.len();
        writeln!(
            out,
            "{}: {} segments, {} snapshots, records up to {}: {}",
            dir.display(),
            report.segments.len(),
            report.snapshots.len(),
            report.last_seq,
            if report.is_clean() { "ok" } else { "PROBLEMS" }
        )
        .map_err(CliError::Output)?;
        for p in &report.problems {
            writeln!(out, "  {}", describe(p)).map_err(CliError::Output)?;
        }
    }
    if damaged > 0 {
        return Err(CliError::Data(format!(
            "{damaged} problem(s) in {} stop the server from starting; `delayq data repair` cuts the damaged logs back to their valid prefix",
            args.data_dir.display()
        )));
    }
    Ok(())
}

fn action(a: &RepairAction) -> String {
    match a {
        RepairAction::Truncated {
            file,
            offset,
            bytes_cut,
            saved_to,
        } => format!(
            "cut {} at byte offset {offset} ({bytes_cut} bytes, saved to {})",
            file.display(),
            saved_to.display()
        ),
        RepairAction::SetAside { file, to } => {
            format!("set aside {} as {}", file.display(), to.display())
        }
    }
}

fn repair(args: &RepairArgs, out: &mut dyn Write) -> Result<(), CliError> {
    if !args.dry_run && !args.yes {
        return Err(CliError::Usage(
            "repair discards the records after the damage: pass --yes to confirm, or --dry-run to see what it would do".into(),
        ));
    }
    for dir in logs(&args.data)? {
        let report = delayq_log::repair(&dir, RepairOptions::default().with_dry_run(args.dry_run))
            .map_err(|e| CliError::Data(e.to_string()))?;
        let verb = if args.dry_run { "would" } else { "did" };
        if report.actions.is_empty() {
            writeln!(out, "{}: nothing to repair", dir.display()).map_err(CliError::Output)?;
        }
        for a in &report.actions {
            writeln!(out, "{} ({verb}): {}", dir.display(), action(a)).map_err(CliError::Output)?;
        }
        if let Some(after) = &report.after {
            for p in &after.problems {
                writeln!(out, "{}: still: {}", dir.display(), describe(p))
                    .map_err(CliError::Output)?;
            }
        }
    }
    Ok(())
}
